"""Executors for compiled graphs: the CPU JIT and (on CUDA hosts) the GPU launch-plan runtime."""
