// Hydra's RESP2 request parser and reply encoders (tools/apps/kvstore/resp.hpp),
// without a server: whole and byte-by-byte input, pipelining, inline quoting,
// every protocol error and limit, and random bytes.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "resp.hpp"

namespace {

using hydra::resp::RequestParser;
using Result = RequestParser::Result;

struct Parsed {
  std::vector<std::vector<std::string>> requests;
  std::string error;      // set when the parser failed
  std::size_t consumed = 0;
};

// Feeds `input` to a parser `step` bytes at a time (0: all at once), the
// way a connection does: consumed bytes are dropped between calls.
Parsed feed(const std::string& input, std::size_t step = 0, hydra::resp::Limits limits = {}) {
  RequestParser p(limits);
  Parsed out;
  std::string buf;
  std::size_t given = 0;
  while (true) {
    std::size_t n = step ? std::min(step, input.size() - given) : input.size() - given;
    buf.append(input, given, n);
    given += n;
    while (true) {
      std::size_t used = 0;
      Result r = p.parse(buf, used);
      if (r == Result::kNeedMore) break;
      if (r == Result::kError) {
        out.error = p.error();
        return out;
      }
      EXPECT_GT(used, 0u);
      EXPECT_LE(used, buf.size());
      if (!p.args().empty()) out.requests.emplace_back(p.args().begin(), p.args().end());
      buf.erase(0, used);
      out.consumed += used;
    }
    if (given == input.size()) return out;
  }
}

using Args = std::vector<std::string>;

TEST(HydraResp, MultibulkWholeAndByteByByte) {
  std::string in = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nva\r\nl\r\n";
  for (std::size_t step : {0, 1, 2, 5}) {
    Parsed r = feed(in, step);
    ASSERT_EQ(r.error, "") << "step " << step;
    ASSERT_EQ(r.requests.size(), 1u) << "step " << step;
    EXPECT_EQ(r.requests[0], (Args{"SET", "key", std::string("va\r\nl")}));  // binary-safe bulk
    EXPECT_EQ(r.consumed, in.size());
  }
}

TEST(HydraResp, PipelinedMixedAndEmpty) {
  std::string in = "*1\r\n$4\r\nPING\r\nPING\r\n*0\r\n*-1\r\n\r\n  GET   k \r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\n";
  for (std::size_t step : {0, 1, 3}) {
    Parsed r = feed(in, step);
    ASSERT_EQ(r.error, "");
    ASSERT_EQ(r.requests.size(), 4u);
    EXPECT_EQ(r.requests[0], Args{"PING"});
    EXPECT_EQ(r.requests[1], Args{"PING"});
    EXPECT_EQ(r.requests[2], (Args{"GET", "k"}));
    EXPECT_EQ(r.requests[3], (Args{"ECHO", ""}));
  }
}

TEST(HydraResp, InlineQuoting) {
  Parsed r = feed("SET \"a b\\x41\\n\" 'it\\'s'\nECHO \"\"\n");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.requests.size(), 2u);
  EXPECT_EQ(r.requests[0], (Args{"SET", "a bA\n", "it's"}));
  EXPECT_EQ(r.requests[1], (Args{"ECHO", ""}));
  EXPECT_NE(feed("SET \"abc\r\n").error.find("unbalanced quotes"), std::string::npos);
  EXPECT_NE(feed("ECHO \"x\"y\r\n").error.find("unbalanced quotes"), std::string::npos);
  EXPECT_NE(feed("ECHO 'x\r\n").error.find("unbalanced quotes"), std::string::npos);
}

TEST(HydraResp, TruncatedInputWaits) {
  // Every proper prefix of a request needs more input: nothing is executed
  // from a partial request.
  std::string in = "*2\r\n$3\r\nGET\r\n$3\r\nabc\r\n";
  for (std::size_t n = 0; n < in.size(); ++n) {
    Parsed r = feed(in.substr(0, n));
    EXPECT_EQ(r.error, "") << n;
    EXPECT_TRUE(r.requests.empty()) << n;
  }
}

TEST(HydraResp, ProtocolErrors) {
  struct Case {
    std::string in, error;
  } cases[] = {
      {"*x\r\n", "invalid multibulk length"},
      {"*1x\r\n", "invalid multibulk length"},
      {"*01\r\n", "invalid multibulk length"},
      {"*99999999999\r\n", "invalid multibulk length"},
      {"*2\r\n$3\r\nGET\r\n$2\r\nabcdef\r\n", "not followed by CRLF"},
      {"*1\r\n$-3\r\n", "invalid bulk length"},
      {"*1\r\n$-1\r\n", "invalid bulk length"},
      {"*1\r\n$99999999999\r\n", "invalid bulk length"},
      {"*1\r\n$abc\r\n", "invalid bulk length"},
      {"*1\r\n:5\r\n", "expected '$', got ':'"},
      {"*1\r\n\x01", "expected '$', got '\\x01'"},
      {"*1\rX", "unterminated multibulk count"},
      {"*1\r\n$3\rX", "unterminated bulk count"},
  };
  for (const auto& c : cases) {
    for (std::size_t step : {0, 1}) {
      Parsed r = feed(c.in, step);
      EXPECT_NE(r.error.find(c.error), std::string::npos) << "input " << testing::PrintToString(c.in) << " gave '" << r.error << "'";
      EXPECT_EQ(r.error.rfind("Protocol error: ", 0), 0u);
    }
  }
}

TEST(HydraResp, Limits) {
  hydra::resp::Limits l;
  l.max_bulk = 10;
  l.max_multibulk = 3;
  l.max_inline = 32;
  EXPECT_EQ(feed("*1\r\n$10\r\n0123456789\r\n", 0, l).error, "");
  EXPECT_NE(feed("*1\r\n$11\r\n", 0, l).error.find("invalid bulk length"), std::string::npos);
  EXPECT_EQ(feed("*3\r\n", 0, l).error, "");
  EXPECT_NE(feed("*4\r\n", 0, l).error.find("invalid multibulk length"), std::string::npos);
  EXPECT_NE(feed(std::string(40, 'a'), 1, l).error.find("too big inline request"), std::string::npos);
  EXPECT_NE(feed("*" + std::string(40, '1'), 1, l).error.find("multibulk count"), std::string::npos);
  EXPECT_NE(feed("*1\r\n$" + std::string(40, '1'), 1, l).error.find("bulk count"), std::string::npos);
  // The default bulk limit is Redis's 512 MiB.
  EXPECT_EQ(feed("*1\r\n$536870912\r\n").error, "");
  EXPECT_NE(feed("*1\r\n$536870913\r\n").error.find("invalid bulk length"), std::string::npos);
}

TEST(HydraResp, RandomBytesNeverOverrun) {
  std::mt19937_64 rng(42);
  const std::string alphabet = "*$\r\n0123456789-: abcPING\"'\\x";
  for (int round = 0; round < 20000; ++round) {
    std::string in(rng() % 64, '\0');
    for (char& c : in) c = (rng() % 4 == 0) ? char(rng()) : alphabet[rng() % alphabet.size()];
    feed(in, 1 + rng() % 7);  // checks used <= buffered on every request
  }
}

TEST(HydraResp, Int64) {
  long long v = 0;
  EXPECT_TRUE(hydra::resp::parse_int64("0", v) && v == 0);
  EXPECT_TRUE(hydra::resp::parse_int64("-42", v) && v == -42);
  EXPECT_TRUE(hydra::resp::parse_int64("9223372036854775807", v) && v == 9223372036854775807LL);
  EXPECT_TRUE(hydra::resp::parse_int64("-9223372036854775808", v) && v == (-9223372036854775807LL - 1));
  for (const char* bad : {"", "-", "+1", " 1", "1 ", "01", "-0", "9223372036854775808", "-9223372036854775809", "1e3", "99999999999999999999"})
    EXPECT_FALSE(hydra::resp::parse_int64(bad, v)) << bad;
}

TEST(HydraResp, Encoders) {
  std::string out;
  hydra::resp::simple(out, "OK");
  hydra::resp::error(out, "ERR a\r\nb");
  hydra::resp::integer(out, -7);
  hydra::resp::bulk(out, std::string("x\0y", 3));
  hydra::resp::nil(out);
  hydra::resp::array(out, 2);
  static const char kWant[] = "+OK\r\n-ERR a  b\r\n:-7\r\n$3\r\nx\0y\r\n$-1\r\n*2\r\n";
  EXPECT_EQ(out, std::string(kWant, sizeof kWant - 1));
}

// RESP3 as Redis 7.0 sends it after HELLO 3 (byte for byte from
// redis-server 7.0.15), and the RESP2 each falls back to.
TEST(HydraResp, Resp3Encoders) {
  std::string out;
  hydra::resp::nil(out, true);
  hydra::resp::map(out, 1, true);
  hydra::resp::verbatim(out, "# Keyspace\r\n", true);
  EXPECT_EQ(out, "_\r\n%1\r\n=16\r\ntxt:# Keyspace\r\n\r\n");
  out.clear();
  hydra::resp::nil(out, false);
  hydra::resp::map(out, 1, false);
  hydra::resp::verbatim(out, "ab", false);
  EXPECT_EQ(out, "$-1\r\n*2\r\n$2\r\nab\r\n");
}

}  // namespace
