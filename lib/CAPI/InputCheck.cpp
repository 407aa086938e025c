//===- InputCheck.cpp - reject inputs that crash upstream parsers ---------===//
#include "InputCheck.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using llvm::StringRef;

namespace mlir::mlircap {
namespace {
struct Checker {
  StringRef text, name;
  std::string out;

  void error(size_t pos, const llvm::Twine &msg) {
    StringRef before = text.take_front(pos);
    size_t line = before.count('\n') + 1;
    size_t lineStart = before.rfind('\n');
    size_t col = pos - (lineStart == StringRef::npos ? 0 : lineStart + 1) + 1;
    llvm::raw_string_ostream os(out);
    os << name << ":" << line << ":" << col << ": error: " << msg << "\n";
  }

  /// The bracketed list that starts at text[open] == '['; npos if unterminated.
  size_t closeOf(size_t open) {
    int depth = 0;
    for (size_t i = open; i < text.size(); ++i) {
      if (text[i] == '[')
        ++depth;
      else if (text[i] == ']' && --depth == 0)
        return i;
    }
    return StringRef::npos;
  }

  /// Each occurrence of `key = [ ... ]`: calls check(body, bodyPos).
  /// With `requireList`, `key =` must be followed by a list, `array<` or an
  /// attribute alias.
  template <typename Fn>
  void forEachList(StringRef key, Fn check, bool requireList = false) {
    size_t pos = 0;
    while ((pos = text.find(key, pos)) != StringRef::npos) {
      size_t at = pos;
      pos += key.size();
      StringRef rest = text.drop_front(pos).ltrim(" \t");
      if (!rest.consume_front("="))
        continue;
      rest = rest.ltrim(" \t\n");
      if (!rest.starts_with("[")) {
        if (requireList && !rest.starts_with("array<") && !rest.starts_with("#"))
          error(at, "'" + key + "' must be followed by a list of integers");
        continue;
      }
      size_t open = text.size() - rest.size();
      size_t close = closeOf(open);
      if (close == StringRef::npos) {
        error(at, "'" + key + "' list is not terminated by ']'");
        return;
      }
      check(text.slice(open + 1, close), open + 1, at);
    }
  }
};
} // namespace

/// The parser recurses once per nested region, attribute list or type: input
/// nested a few thousand levels deep overflows the stack (a segfault, with
/// no diagnostic). Real IR nests a few dozen levels at most.
static constexpr int kMaxNesting = 256;

std::string checkKnownParserCrashes(StringRef text, StringRef bufferName) {
  Checker c{text, bufferName, {}};
  // Bytecode ("ML\xefR") is binary: brackets in it mean nothing.
  if (!text.starts_with("ML\xefR")) {
    int depth = 0;
    for (size_t i = 0, e = text.size(); i < e; ++i) {
      char ch = text[i];
      if (ch == '"') { // string literal, with escapes
        for (++i; i < e && text[i] != '"' && text[i] != '\n'; ++i)
          if (text[i] == '\\')
            ++i;
        continue;
      }
      if (ch == '/' && i + 1 < e && text[i + 1] == '/') { // comment
        while (i < e && text[i] != '\n')
          ++i;
        continue;
      }
      if (ch == '(' || ch == '[' || ch == '{' || ch == '<') {
        if (++depth > kMaxNesting) {
          c.error(i, "input nested more than " + llvm::Twine(kMaxNesting) +
                         " levels deep (regions, attributes, types); "
                         "the parser would overflow its stack");
          return c.out;
        }
      } else if (ch == ')' || ch == ']' || ch == '}' ||
                 (ch == '>' && !(i > 0 && text[i - 1] == '-') &&
                  !(i + 1 < e && text[i + 1] == '='))) {
        depth = std::max(0, depth - 1);
      }
    }
  }
  // linalg.generic asserts when an iterator type is not a string.
  c.forEachList("iterator_types", [&](StringRef body, size_t, size_t at) {
    llvm::SmallVector<StringRef> items;
    body.split(items, ',', -1, /*KeepEmpty=*/false);
    for (StringRef item : items) {
      item = item.trim();
      if (item == "\"parallel\"" || item == "\"reduction\"" || item == "\"window\"" ||
          item.starts_with("#linalg.iterator_type<"))
        continue;
      c.error(at, "iterator_types entries must be \"parallel\", \"reduction\" or \"window\", got '" + item + "'");
      return;
    }
  });
  // linalg.transpose/broadcast assert when their integer list does not parse.
  for (StringRef key : {"permutation", "dimensions"}) {
    c.forEachList(key, [&](StringRef body, size_t, size_t at) {
      llvm::SmallVector<StringRef> items;
      body.split(items, ',', -1, /*KeepEmpty=*/true);
      if (body.trim().empty())
        return;
      for (StringRef item : items) {
        item = item.trim();
        item.consume_front("-");
        if (item.empty() || !llvm::all_of(item, llvm::isDigit)) {
          c.error(at, "'" + key + "' must be a list of integers");
          return;
        }
      }
    }, /*requireList=*/true);
  }
  return c.out;
}
} // namespace mlir::mlircap
