#include "documents.hpp"

#include <sstream>

#include <yaml-cpp/eventhandler.h>

namespace gossamer::config::detail {

namespace {

// Walks the event stream without building nodes, remembering where each
// document starts and where its first content is.
//
// Why not YAML::LoadAll: in yaml-cpp 0.7 a token that cannot start a node at
// document level (a stray ',') is never consumed, so LoadAll appends null
// documents forever until memory runs out (jbeder/yaml-cpp#1040, fixed
// upstream after 0.8.0 by #1319); YAML::Load silently ignores it. Found by
// tests/config/fuzz_config.cpp.
class DocumentWalker : public YAML::EventHandler {
 public:
  YAML::Mark start;                    // of the current document
  std::optional<YAML::Mark> content;   // its first non-null node

  void OnDocumentStart(const YAML::Mark& mark) override {
    start = mark;
    content.reset();
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { note(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    note(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    note(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    note(mark);
  }
  void OnMapEnd() override {}

 private:
  void note(const YAML::Mark& mark) {
    if (!content) content = mark;
  }
};

bool same(const YAML::Mark& a, const YAML::Mark& b) {
  return a.pos == b.pos && a.line == b.line && a.column == b.column;
}

}  // namespace

std::optional<YAML::Node> parse_document(const std::string& text, Diagnostics& diag) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentWalker walker;
    std::optional<YAML::Mark> previous;
    for (int index = 0; parser.HandleNextDocument(walker); ++index) {
      if (previous && same(walker.start, *previous)) {
        // The parser made no progress: the token at `start` starts no node.
        const auto pos = static_cast<std::size_t>(walker.start.pos);
        const std::string what =
            pos < text.size() ? "'" + std::string(1, text[pos]) + "'" : "end of input";
        diag.error(walker.start, "", "YAML syntax error: unexpected " + what);
        return std::nullopt;
      }
      if (index > 0 && walker.content) {
        // A trailing "---" makes an empty document; that one is harmless.
        diag.error(*walker.content, "", "expected one YAML document, found another");
        break;
      }
      previous = walker.start;
    }
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    diag.error(e.mark, "", "YAML syntax error: " + e.msg);
    return std::nullopt;
  }
}

}  // namespace gossamer::config::detail
