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

/// The end of the string literal at text[i] == '"' as the MLIR lexer reads it
/// (escapes \" \\ \n \t and two hex digits); npos where it does not lex (a
/// newline or the end of input before the closing quote, an unknown escape).
static size_t stringEnd(StringRef text, size_t i) {
  for (++i; i < text.size(); ++i) {
    char ch = text[i];
    if (ch == '"')
      return i + 1;
    if (ch == '\n' || ch == '\v' || ch == '\f')
      return StringRef::npos;
    if (ch == '\\') {
      if (i + 1 < text.size() && StringRef("\"\\nt").contains(text[i + 1]))
        ++i;
      else if (i + 2 < text.size() && llvm::isHexDigit(text[i + 1]) && llvm::isHexDigit(text[i + 2]))
        i += 2;
      else
        return StringRef::npos;
    }
  }
  return StringRef::npos;
}

/// The file metadata ({-# dialect_resources: { builtin: { key: VALUE } } #-}):
/// the parser takes each entry's VALUE token without checking it, and a value
/// that does not lex (an unterminated string, an unknown escape, a stray
/// character such as `$`, the end of input) asserts ("shouldn't advance past
/// EOF or errors"). Such a value must be a string literal or a word.
static void checkResourceValues(Checker &c) {
  StringRef text = c.text;
  size_t e = text.size(), i = 0;
  auto skipSpace = [&](size_t j) {
    while (j < e) {
      if (llvm::isSpace(text[j]))
        ++j;
      else if (text.substr(j).starts_with("//"))
        j = std::min(text.find('\n', j), e);
      else
        break;
    }
    return j;
  };
  // find the metadata's start outside strings and comments
  for (; i < e; ++i) {
    if (text[i] == '"') {
      size_t end = stringEnd(text, i);
      if (end == StringRef::npos)
        return; // the lexer reports it before any metadata
      i = end - 1;
    } else if (text.substr(i).starts_with("//")) {
      i = std::min(text.find('\n', i), e);
    } else if (text.substr(i).starts_with("{-#")) {
      break;
    }
  }
  int depth = 0;
  for (i += 3; i < e; ++i) {
    char ch = text[i];
    if (ch == '"') {
      size_t end = stringEnd(text, i);
      if (end == StringRef::npos)
        return; // a key: the parser reports it
      i = end - 1;
    } else if (text.substr(i).starts_with("//")) {
      i = std::min(text.find('\n', i), e);
    } else if (text.substr(i).starts_with("#-}")) {
      return;
    } else if (ch == '{') {
      ++depth;
    } else if (ch == '}') {
      depth = std::max(0, depth - 1);
    } else if (ch == ':' && depth == 2) {
      size_t v = skipSpace(i + 1);
      if (v < e && (text[v] == '"' ? stringEnd(text, v) != StringRef::npos
                                   : llvm::isAlnum(text[v]) || text[v] == '_'))
        continue;
      c.error(std::min(v, e), "a resource entry's value must be a terminated string literal, "
                              "'true' or 'false'");
      return;
    }
  }
}

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
  checkResourceValues(c);
  return c.out;
}
} // namespace mlir::mlircap
