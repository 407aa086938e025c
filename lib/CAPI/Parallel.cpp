//===- Parallel.cpp - the thread pool JIT-compiled kernels run on ---------===//
//
// mlircap_parallel_for is what mlircap-outline-parallel's calls resolve to:
// it splits [lo, hi) into at most num_threads chunks of at least `grain`
// iterations and runs them on a small persistent pool (the calling thread
// takes chunks too). Only the workers a job needs are woken, each through its
// own flag and condition variable; a worker spins briefly after a job
// (kernels come back to back) and then sleeps. Chunks are claimed through
// one atomic word holding (job generation, chunk count, next chunk), so a
// worker waking late can never run a chunk of a finished job, and the caller
// finishes the job alone if no worker shows up (no deadlock after fork()).
// One job at a time: a call while the pool is busy (another thread, or a
// nested call from inside a body) runs its range on the calling thread.
//
// Where torch's OpenMP runtime (libgomp.so.1) is loaded in the process, jobs
// run on its thread team instead (GOMP_parallel, what torch's own kernels
// and inductor's C++ kernels use): two pools of spinning workers on the same
// cores took turns with each other between a library matmul and the next
// kernel. MLIRCAP_CPU_POOL=own keeps the pool above.
//
// A job on the OpenMP team still ends at the team's barrier, which waits for
// every thread to arrive, also one that claimed no chunk because it was not
// running (a host whose cores other processes use: the caller did every chunk,
// then waited up to a scheduler time slice). When two jobs in a row were done
// by the caller alone, the next jobs run on the caller directly (no barrier),
// 16 at first, twice as many each time it happens again (to 4096); a job the
// team helped with resets that. Results are the same either way (each chunk
// writes what it wrote before). mlircap_parallel_stats counts the outcomes.
//
//===----------------------------------------------------------------------===//
#define MLIRCAP_BUILDING_CORE
#include "mlircap-c/Core.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MLIRCAP_PAUSE() _mm_pause()
#else
#define MLIRCAP_PAUSE() std::this_thread::yield()
#endif

namespace {
using Body = void (*)(void *, int64_t, int64_t);

// Ticket layout: generation (32 bits) | chunk count (16) | next chunk (16).
constexpr int kMaxChunks = (1 << 15) - 1;
uint64_t makeTicket(uint64_t gen, uint64_t n, uint64_t next) {
  return (gen << 32) | (n << 16) | next;
}
uint32_t genOf(uint64_t t) { return static_cast<uint32_t>(t >> 32); }
int countOf(uint64_t t) { return static_cast<int>((t >> 16) & 0xffff); }
int nextOf(uint64_t t) { return static_cast<int>(t & 0xffff); }

thread_local bool insideBody = false;

/// The OpenMP runtime already loaded in the process (torch's libgomp), or
/// none (then the pool below runs every job).
struct OpenMP {
  using Parallel = void (*)(void (*)(void *), void *, unsigned, unsigned);
  using IntFn = int (*)();
  Parallel parallel = nullptr;
  IntFn inParallel = nullptr;

  static const OpenMP &get() {
    static const OpenMP omp;
    return omp;
  }

private:
  OpenMP() {
    const char *pool = std::getenv("MLIRCAP_CPU_POOL");
    if (pool && std::strcmp(pool, "own") == 0)
      return;
    void *lib = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD); // only if already loaded
    if (!lib)
      return;
    auto p = reinterpret_cast<Parallel>(dlsym(lib, "GOMP_parallel"));
    auto in = reinterpret_cast<IntFn>(dlsym(lib, "omp_in_parallel"));
    if (p && in) {
      parallel = p;
      inParallel = in;
    }
  }
};

/// A job on the OpenMP team: each team thread claims chunks (fixed bounds,
/// so the split does not depend on how many threads the runtime gives).
struct OmpJob {
  void (*fn)(void *, int64_t, int64_t);
  void *ctx;
  int64_t lo, hi;
  int chunks;
  std::atomic<int> next{0};
  std::atomic<int> helped{0}; // chunks run by team threads other than the caller
};

thread_local bool dispatching = false; // the thread that called GOMP_parallel

void ompBody(void *p) {
  auto *job = static_cast<OmpJob *>(p);
  bool outer = insideBody, caller = dispatching;
  insideBody = true;
  int64_t n = job->hi - job->lo;
  for (int c = job->next.fetch_add(1); c < job->chunks; c = job->next.fetch_add(1)) {
    job->fn(job->ctx, job->lo + n * c / job->chunks, job->lo + n * (c + 1) / job->chunks);
    if (!caller)
      job->helped.fetch_add(1, std::memory_order_relaxed);
  }
  insideBody = outer;
}

/// Outcomes of parallel jobs (relaxed counters; see mlircap_parallel_stats).
struct Stats {
  std::atomic<int64_t> teamJobs{0}, helpedJobs{0}, callerJobs{0};
};
Stats stats;

/// When the OpenMP team stops helping (see the file comment): consecutive
/// jobs the caller did alone, jobs still to run on the caller, the next backoff.
struct Backoff {
  static constexpr int kFirst = 16, kMax = 4096;
  std::atomic<int> alone{0};
  std::atomic<int> left{0};
  std::atomic<int> next{kFirst};
  std::atomic<bool> enabled{true};

  bool skip() {
    if (!enabled.load(std::memory_order_relaxed) || left.load(std::memory_order_relaxed) <= 0)
      return false;
    left.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  void record(bool helped) {
    if (helped) {
      alone.store(0, std::memory_order_relaxed);
      next.store(kFirst, std::memory_order_relaxed);
      return;
    }
    if (alone.fetch_add(1, std::memory_order_relaxed) + 1 < 2)
      return;
    alone.store(0, std::memory_order_relaxed);
    int n = next.load(std::memory_order_relaxed);
    left.store(n, std::memory_order_relaxed);
    next.store(std::min(2 * n, kMax), std::memory_order_relaxed);
  }
};
Backoff backoff;

class Pool {
public:
  static Pool &get() {
    static Pool *pool = new Pool(); // never destroyed: workers may outlive exit
    return *pool;
  }

  void setThreads(int n) { wanted.store(std::max(1, std::min(n, kMaxChunks)), std::memory_order_relaxed); }
  int threads() const { return wanted.load(std::memory_order_relaxed); }

  void run(Body fn, void *ctx, int64_t lo, int64_t hi, int64_t grain) {
    int64_t n = hi - lo;
    if (n <= 0)
      return;
    grain = std::max<int64_t>(grain, 1);
    int64_t chunks = std::min<int64_t>(threads(), n / grain);
    if (chunks <= 1 || insideBody) {
      fn(ctx, lo, hi);
      return;
    }
    const OpenMP &omp = OpenMP::get();
    if (omp.parallel) {
      if (omp.inParallel()) { // inside an OpenMP region of someone else's: no nesting
        fn(ctx, lo, hi);
        return;
      }
      if (backoff.skip()) { // the team did not help lately: no barrier to wait at
        stats.callerJobs.fetch_add(1, std::memory_order_relaxed);
        fn(ctx, lo, hi);
        return;
      }
      OmpJob j{fn, ctx, lo, hi, static_cast<int>(chunks)};
      dispatching = true;
      omp.parallel(ompBody, &j, static_cast<unsigned>(chunks), 0);
      dispatching = false;
      bool helped = j.helped.load(std::memory_order_relaxed) > 0;
      stats.teamJobs.fetch_add(1, std::memory_order_relaxed);
      if (helped)
        stats.helpedJobs.fetch_add(1, std::memory_order_relaxed);
      backoff.record(helped);
      return;
    }
    std::unique_lock<std::mutex> busy(dispatch, std::try_to_lock);
    if (!busy.owns_lock()) {
      fn(ctx, lo, hi);
      return;
    }
    resize(threads() - 1);
    job = {fn, ctx, lo, hi, static_cast<int>(chunks)};
    done.store(0, std::memory_order_relaxed);
    uint64_t gen = ++generation;
    ticket.store(makeTicket(gen, chunks, 0), std::memory_order_seq_cst);
    for (int i = 0; i + 1 < chunks; ++i)
      workers[i]->request(static_cast<uint32_t>(gen));
    insideBody = true;
    work(static_cast<uint32_t>(gen));
    insideBody = false;
    // Wait for chunks claimed by workers.
    for (int spins = 0; done.load(std::memory_order_acquire) < chunks; ++spins) {
      if (spins < 4096)
        MLIRCAP_PAUSE();
      else
        std::this_thread::yield();
    }
  }

private:
  struct Job {
    Body fn;
    void *ctx;
    int64_t lo, hi;
    int chunks;
  };

  /// Claims and runs chunks of job `gen` until none is left.
  void work(uint32_t gen) {
    uint64_t t = ticket.load(std::memory_order_acquire);
    while (genOf(t) == gen && nextOf(t) < countOf(t)) {
      if (!ticket.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel))
        continue;
      // The job cannot finish before this chunk is done: `job` is stable.
      int c = nextOf(t);
      int64_t n = job.hi - job.lo;
      int64_t begin = job.lo + n * c / job.chunks;
      int64_t end = job.lo + n * (c + 1) / job.chunks;
      job.fn(job.ctx, begin, end);
      done.fetch_add(1, std::memory_order_release);
      t = ticket.load(std::memory_order_acquire);
    }
  }

  struct Worker {
    std::thread thread;
    std::atomic<uint32_t> go{0}; // the generation of the last job it was asked to join
    std::atomic<bool> sleeping{false};
    std::mutex mutex;
    std::condition_variable wake;

    void request(uint32_t gen) {
      go.store(gen, std::memory_order_seq_cst);
      if (sleeping.load(std::memory_order_seq_cst)) {
        { std::lock_guard<std::mutex> lock(mutex); }
        wake.notify_one();
      }
    }
  };

  void workerLoop(Worker *self) {
    insideBody = true; // a body calling parallel_for again runs inline
    uint32_t seen = self->go.load(std::memory_order_acquire);
    for (;;) {
      auto spinUntil = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      for (int i = 0;; ++i) {
        if (self->go.load(std::memory_order_acquire) != seen || stop.load(std::memory_order_relaxed))
          break;
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > spinUntil) {
          std::unique_lock<std::mutex> lock(self->mutex);
          self->sleeping.store(true, std::memory_order_seq_cst);
          self->wake.wait(lock, [&] {
            return self->go.load(std::memory_order_seq_cst) != seen ||
                   stop.load(std::memory_order_relaxed);
          });
          self->sleeping.store(false, std::memory_order_relaxed);
          break;
        }
        MLIRCAP_PAUSE();
      }
      if (stop.load(std::memory_order_relaxed))
        return;
      seen = self->go.load(std::memory_order_acquire);
      work(seen);
    }
  }

  /// `n` workers (called with the dispatch lock held). After fork() the
  /// child has none of the parent's threads: forget them (leaked) and start anew.
  void resize(int n) {
    pid_t pid = getpid();
    if (pid != owner) {
      workers.clear();
      owner = pid;
    }
    if (static_cast<int>(workers.size()) == n)
      return;
    stop.store(true);
    for (Worker *w : workers) {
      { std::lock_guard<std::mutex> lock(w->mutex); }
      w->wake.notify_one();
      w->thread.join();
      delete w;
    }
    workers.clear();
    stop.store(false);
    for (int i = 0; i < n; ++i) {
      auto *w = new Worker();
      w->thread = std::thread([this, w] { workerLoop(w); });
      workers.push_back(w);
    }
  }

  std::atomic<int> wanted{std::max(1u, std::thread::hardware_concurrency())};
  std::mutex dispatch;
  std::vector<Worker *> workers;
  pid_t owner = getpid();
  Job job{};
  uint64_t generation = 0;
  std::atomic<uint64_t> ticket{0};
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
};
} // namespace

extern "C" {
void mlircap_set_num_threads(int n) { Pool::get().setThreads(n); }

int mlircap_get_num_threads(void) { return Pool::get().threads(); }

/// out[0]: jobs run on torch's OpenMP team, out[1]: those of them another team
/// thread ran a chunk of, out[2]: jobs run on the calling thread while the team
/// was not helping (see the file comment). Declared here only (no header):
/// tests read it through ctypes.
MLIRCAP_EXPORT void mlircap_parallel_stats(int64_t *out) {
  out[0] = stats.teamJobs.load(std::memory_order_relaxed);
  out[1] = stats.helpedJobs.load(std::memory_order_relaxed);
  out[2] = stats.callerJobs.load(std::memory_order_relaxed);
}

/// Turns the backoff off (0) or on (1, the default) and forgets its state;
/// for measuring it and for tests (through ctypes).
MLIRCAP_EXPORT void mlircap_parallel_backoff(int on) {
  backoff.enabled.store(on != 0, std::memory_order_relaxed);
  backoff.alone.store(0, std::memory_order_relaxed);
  backoff.left.store(0, std::memory_order_relaxed);
  backoff.next.store(Backoff::kFirst, std::memory_order_relaxed);
}

void mlircap_parallel_for(void (*body)(void *, int64_t, int64_t), void *ctx, int64_t lo,
                          int64_t hi, int64_t grain) {
  Pool::get().run(body, ctx, lo, hi, grain);
}
} // extern "C"
