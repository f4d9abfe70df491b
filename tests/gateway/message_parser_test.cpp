// The data plane's parser: the head as it came, kept in text a connection reuses, and the body
// written to the caller's buffer.
#include "gateway/message_parser.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

namespace sluice::gateway {
namespace {

namespace http = boost::beast::http;
using boost::beast::error_code;

// Feeds `wire` to the parser whole; the bytes it used.
template <bool isRequest>
std::size_t put(MessageParser<isRequest>& p, std::string_view wire, error_code& ec) {
  return p.put(boost::asio::buffer(wire.data(), wire.size()), ec);
}

std::vector<std::pair<std::string, std::string>> fields_of(std::span<const HeadField> fields) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const HeadField& f : fields) out.emplace_back(f.name_string(), f.value());
  return out;
}

// A request parser past a chunked request's head, its body going to buf.
struct ChunkedRequest {
  ChunkedRequest() {
    error_code ec;
    put(p, "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", ec);
    EXPECT_FALSE(ec) << ec.message();
    p.body().data = buf;
    p.body().size = sizeof buf;
  }
  // The body decoded so far.
  std::string decoded() { return std::string(buf, sizeof buf - p.body().size); }

  HeadText text;
  RequestParser p{text};
  char buf[64];
};

// Of a head that did not end, the request line is read when it came whole and is one, or has a good
// method and target and a version missing or other (refused at once, not waited on: see below); a
// head that ended keeps what its parse read.
TEST(MessageParserTest, TheRequestLineOfAHeadThatDidNotEndIsReadOnRequest) {
  const auto read = [](std::string_view wire, error_code want = http::error::need_more) {
    auto text = std::make_unique<HeadText>();
    auto p = std::make_unique<RequestParser>(*text);
    error_code ec;
    EXPECT_EQ(put(*p, wire, ec), 0u);
    EXPECT_EQ(ec, want) << wire;
    p->read_request_line(boost::asio::buffer(wire.data(), wire.size()));
    return std::tuple{std::string(p->method_string()), std::string(p->target()), p->http11(), p->method()};
  };
  EXPECT_EQ(read("\r\nHEAD /a?b=1 HTTP/1.0\r\nHost: x\r\n"),
            std::tuple(std::string("HEAD"), std::string("/a?b=1"), false, http::verb::head));
  EXPECT_EQ(read("GET /a HTTP/1.1\r\n"), std::tuple(std::string("GET"), std::string("/a"), true, http::verb::get));
  EXPECT_EQ(read("GET /a\r\n", http::error::bad_version),
            std::tuple(std::string("GET"), std::string("/a"), true, http::verb::get));
  EXPECT_EQ(read("POST /a HTTP/2.0\r\nHost: x\r\n", http::error::bad_version),
            std::tuple(std::string("POST"), std::string("/a"), true, http::verb::post));
  EXPECT_EQ(read("GET /a HTTP/1.1"), std::tuple(std::string(), std::string(), true, http::verb::unknown));
  EXPECT_EQ(read("GET /a HTTP/1.2\r\n"), std::tuple(std::string("GET"), std::string("/a"), true, http::verb::get));
  EXPECT_EQ(read("get /a HTTP/1.1\r\n", http::error::bad_method),
            std::tuple(std::string(), std::string(), true, http::verb::unknown));
  HeadText text;
  RequestParser p(text);
  error_code ec;
  const std::string wire = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(put(p, wire, ec), wire.size());
  const std::string other = "POST /b HTTP/1.1\r\n";
  p.read_request_line(boost::asio::buffer(other));
  EXPECT_EQ(p.method_string(), "GET");
  EXPECT_EQ(p.target(), "/a");
}

TEST(MessageParserTest, ARequestsHeadIsKeptAsItCame) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  const std::string wire = "PATCH /api/orders/7?x=1 HTTP/1.1\r\nHost: a\r\nx-USER-id:  42 \r\nX-User-Id: b\r\n\r\n";
  EXPECT_EQ(put(p, wire, ec), wire.size());
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(p.is_header_done());
  EXPECT_EQ(p.method(), http::verb::patch);
  EXPECT_EQ(p.method_string(), "PATCH");
  EXPECT_EQ(p.target(), "/api/orders/7?x=1");
  using Fields = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(fields_of(p.fields()), (Fields{{"Host", "a"}, {"x-USER-id", "42"}, {"X-User-Id", "b"}}));
  EXPECT_EQ(p.fields()[0].name(), http::field::host);
  EXPECT_EQ(p.fields()[1].name(), http::field::unknown);
}

TEST(MessageParserTest, AnUnknownMethodKeepsItsName) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  put(p, "BREW /pot HTTP/1.1\r\nHost: h\r\n\r\n", ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.method(), http::verb::unknown);
  EXPECT_EQ(p.method_string(), "BREW");
}

TEST(MessageParserTest, AResponsesStatusReasonAndFields) {
  HeadText text;
  ResponseParser p(text);
  error_code ec;
  const std::string wire = "HTTP/1.1 503 Busy Now\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n";
  put(p, wire, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(p.is_done());
  EXPECT_EQ(p.status(), 503u);
  EXPECT_EQ(p.reason(), "Busy Now");
  ASSERT_EQ(p.fields().size(), 2u);
  EXPECT_EQ(p.fields()[0].name(), http::field::retry_after);
  EXPECT_EQ(p.fields()[0].value(), "3");
}

// A connection's next message reuses the text: no field of the last one shows, and views stay
// right when the text has to grow (it moves) for a larger head.
TEST(MessageParserTest, TheNextMessageOnTheTextSeesOnlyItsOwnHead) {
  HeadText text;
  error_code ec;
  {
    RequestParser p(text);
    put(p, "GET /a HTTP/1.0\r\nA: 1\r\nB: 2\r\n\r\n", ec);
    ASSERT_FALSE(ec);
    ASSERT_EQ(p.fields().size(), 2u);
  }
  RequestParser p(text);
  std::string wire = "GET /b HTTP/1.0\r\n";
  const std::string long_value(1500, 'v');  // 6 KB in all: under the 8 KiB header limit
  for (int i = 0; i < 4; ++i) wire += "F" + std::to_string(i) + ": " + long_value + "\r\n";
  wire += "\r\n";
  put(p, wire, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.target(), "/b");
  ASSERT_EQ(p.fields().size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p.fields()[static_cast<std::size_t>(i)].name_string(), "F" + std::to_string(i));
    EXPECT_EQ(p.fields()[static_cast<std::size_t>(i)].value(), long_value);
  }
}

// The error answer and the access log read what there was.
TEST(MessageParserTest, AHeadThatFailsMidwayShowsWhatItHadRead) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  put(p, "GET /q HTTP/1.0\r\nA: 1\r\nB C: 2\r\n\r\n", ec);
  EXPECT_EQ(ec, http::error::bad_field);
  EXPECT_EQ(p.method_string(), "GET");
  EXPECT_EQ(p.target(), "/q");
  ASSERT_EQ(p.fields().size(), 1u);
  EXPECT_EQ(p.fields()[0].value(), "1");
}

TEST(MessageParserTest, TheBodyGoesToTheCallersBufferAndStopsWhenItIsFull) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  const std::string head = "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n";
  EXPECT_EQ(put(p, head, ec), head.size());
  ASSERT_FALSE(ec);
  char buf[4];
  p.body().data = buf;
  p.body().size = sizeof buf;
  EXPECT_EQ(put(p, "0123456789", ec), 4u);
  EXPECT_EQ(ec, http::error::need_buffer);
  EXPECT_EQ(std::string_view(buf, 4), "0123");
  EXPECT_EQ(p.body().size, 0u);
  p.body().data = buf;
  p.body().size = sizeof buf;
  EXPECT_EQ(put(p, "456789", ec), 4u);
  EXPECT_EQ(std::string_view(buf, 4), "4567");
  p.body().data = buf;
  p.body().size = sizeof buf;
  EXPECT_EQ(put(p, "89", ec), 2u);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p.is_done());
  EXPECT_EQ(std::string_view(buf, 2), "89");
}

TEST(MessageParserTest, ChunksArriveWithoutTheirFraming) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  const std::string wire = "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  char buf[16];
  p.body().data = buf;
  p.body().size = sizeof buf;
  std::size_t used = 0;
  while (!p.is_done() && used < wire.size()) {
    used += put(p, std::string_view(wire).substr(used), ec);
    ASSERT_FALSE(ec && ec != http::error::need_more) << ec.message();
  }
  EXPECT_TRUE(p.is_done());
  EXPECT_TRUE(p.chunked());
  EXPECT_EQ(std::string_view(buf, sizeof buf - p.body().size), "abcde");
}

TEST(MessageParserTest, WithNoBufferTheBodyWaits) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  const std::string head = "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n";
  put(p, head, ec);
  EXPECT_EQ(put(p, "ab", ec), 0u);
  EXPECT_EQ(ec, http::error::need_buffer);
  EXPECT_FALSE(p.is_done());
}

// Two different lengths are refused.
TEST(MessageParserTest, ConflictingLengthsAreRefused) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  put(p, "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab", ec);
  EXPECT_EQ(ec, http::error::multiple_content_length);
}

// --- strictness: what a proxy must not guess at is refused -------------------------------------

struct Bad {
  std::string wire;
  http::error expected;
};

TEST(MessageParserTest, BadRequestHeadsAreRefusedWithTheirReason) {
  const Bad cases[] = {
      {"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", http::error::bad_obs_fold},
      {"get / HTTP/1.1\r\nHost: h\r\n\r\n", http::error::bad_method},
      {"GEt / HTTP/1.1\r\nHost: h\r\n\r\n", http::error::bad_method},
      {"GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n", http::error::bad_target},
      {"GET /a?q=1# HTTP/1.1\r\nHost: h\r\n\r\n", http::error::bad_target},
      {"GET / HTTP/1.1\r\nHost: h\r\nHost : a\r\n\r\n", http::error::bad_field},
      {"GET / HTTP/1.1\r\nHost: h\r\n: a\r\n\r\n", http::error::bad_field},
      {"GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", http::error::bad_field},
      {"GET / HTTP/1.1\r\nHost: h\r\nX: a\nY: b\r\n\r\n", http::error::bad_value},  // a bare LF
      {"GET / HTTP/1.1\r\nHost: h\r\nX: a\rY: b\r\n\r\n", http::error::bad_value},  // a bare CR
      // Lines that end in a bare LF only, which never end the head: refused at once, not timed out.
      {"GET / HTTP/1.1\nHost: x\n\n", http::error::bad_line_ending},
      {"\nGET / HTTP/1.1\r\n", http::error::bad_line_ending},
      // A bare CR in a head not yet ended (it never would end): the same.
      {"GET / HTTP/1.1\r\nHost: h\r\n\r\r\n", http::error::bad_line_ending},
      {"GET / HTTP/1.1\r\nX: a\rb", http::error::bad_line_ending},
      {std::string("GET / HTTP/1.1\r\nHost: h\r\nX: a\x01\r\n\r\n"), http::error::bad_value},
      {std::string("GET / HTTP/1.1\r\nHost: h\r\nX: a\x7f\r\n\r\n"), http::error::bad_value},
      {" / HTTP/1.1\r\n\r\n", http::error::bad_method},
      {"GET  HTTP/1.1\r\n\r\n", http::error::bad_target},
      {"GET /a b HTTP/1.1\r\n\r\n", http::error::bad_version},
      {"GET / HTTP/2.0\r\n\r\n", http::error::bad_version},
      {"GET / HTTP/1.10\r\n\r\n", http::error::bad_version},
      {"GET / http/1.1\r\n\r\n", http::error::bad_version},
      {"GET / HTTP/1.1 \r\n\r\n", http::error::bad_version},
      {"GET /\r\n\r\n", http::error::bad_version},
      // A request line that came whole and is not one is refused before the head ends.
      {"GET /\r\n", http::error::bad_version},
      {"GET / HTTP/2.0\r\nHost: h\r\n", http::error::bad_version},
      {"GET /a b HTTP/1.1\r\n", http::error::bad_version},
      {" / HTTP/1.1\r\n", http::error::bad_method},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", http::error::bad_transfer_encoding},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", http::error::bad_transfer_encoding},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
       http::error::bad_transfer_encoding},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
       http::error::bad_transfer_encoding},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
       http::error::bad_transfer_encoding},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\n", http::error::bad_content_length},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\n", http::error::bad_content_length},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", http::error::bad_content_length},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551616\r\n\r\n", http::error::bad_content_length},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", http::error::multiple_content_length},
  };
  for (const Bad& c : cases) {
    HeadText text;
    RequestParser p(text);
    error_code ec;
    EXPECT_EQ(put(p, c.wire, ec), 0u) << c.wire;
    EXPECT_EQ(ec, c.expected) << c.wire << ": " << ec.message();
    EXPECT_FALSE(p.is_header_done()) << c.wire;
  }
}

// RFC 9112 2.3: a later minor version of HTTP/1 is taken as the latest this speaks, 1.1, in a request
// or a response. Another major version, well-formed, is one this does not speak (a 505 for a
// request); a version that is not one is merely bad (400).
TEST(MessageParserTest, ALaterHttp1IsHttp11AndAnotherMajorVersionIsUnsupported) {
  const auto request = [](std::string_view wire, error_code& ec) {
    HeadText text;
    RequestParser p(text);
    put(p, wire, ec);
    return std::pair{p.http11(), p.version_unsupported()};
  };
  error_code ec;
  EXPECT_EQ(request("GET / HTTP/1.2\r\nHost: h\r\n\r\n", ec), std::pair(true, false));
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(request("GET / HTTP/1.0\r\n\r\n", ec), std::pair(false, false));
  EXPECT_FALSE(ec) << ec.message();
  for (const std::string_view wire : {"GET / HTTP/2.0\r\n\r\n", "GET / HTTP/2.0\r\n", "GET / HTTP/0.9\r\nHost: h\r\n"}) {
    EXPECT_TRUE(request(wire, ec).second) << wire;
    EXPECT_EQ(ec, http::error::bad_version) << wire;
  }
  for (const std::string_view wire : {"GET / HTTP/2.0 \r\n\r\n", "GET / HTTP/2\r\n\r\n", "GET /\r\n\r\n"}) {
    EXPECT_FALSE(request(wire, ec).second) << wire;
    EXPECT_EQ(ec, http::error::bad_version) << wire;
  }
  HeadText text;
  ResponseParser r(text);
  const std::string_view response = "HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n";
  EXPECT_EQ(put(r, response, ec), response.size());
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(r.http11());
}

TEST(MessageParserTest, BadResponseHeadsAreRefusedWithTheirReason) {
  const Bad cases[] = {
      {"HTTP/1.1 20\r\n\r\n", http::error::bad_status},
      {"HTTP/1.1 099 Low\r\n\r\n", http::error::bad_status},
      {"HTTP/1.1 2000 OK\r\n\r\n", http::error::bad_status},
      {"HTTP/1.1  200 OK\r\n\r\n", http::error::bad_status},
      {"HTTP/3 200 OK\r\n\r\n", http::error::bad_version},
      {"HTTP/2.0 200 OK\r\n\r\n", http::error::bad_version},
      {"HTTP/1.1 200 O\x01K\r\n\r\n", http::error::bad_reason},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
       http::error::bad_transfer_encoding},
      {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\n", http::error::multiple_content_length},
  };
  for (const Bad& c : cases) {
    HeadText text;
    ResponseParser p(text);
    error_code ec;
    EXPECT_EQ(put(p, c.wire, ec), 0u) << c.wire;
    EXPECT_EQ(ec, c.expected) << c.wire << ": " << ec.message();
  }
}

// Bytes that cannot begin a response are refused as they come, not waited on for a head's end;
// a beginning that can is waited on.
TEST(MessageParserTest, BytesThatCannotBeginAResponseAreRefusedAtOnce) {
  for (const std::string_view wire : {"S", "SSH-2.0-OpenSSH_9.2", "http/1.1 200 OK", "HTTP1.1", "\r\nHTTP/1.1"}) {
    HeadText text;
    ResponseParser p(text);
    error_code ec;
    EXPECT_EQ(put(p, wire, ec), 0u) << wire;
    EXPECT_EQ(ec, http::error::bad_version) << wire << ": " << ec.message();
  }
  for (const std::string_view wire : {"H", "HTTP", "HTTP/", "HTTP/1.1 200"}) {
    HeadText text;
    ResponseParser p(text);
    error_code ec;
    EXPECT_EQ(put(p, wire, ec), 0u) << wire;
    EXPECT_EQ(ec, http::error::need_more) << wire << ": " << ec.message();
  }
}

TEST(MessageParserTest, AHeadPastTheLimitIsRefusedWhetherOrNotItEnded) {
  HeadText text;
  error_code ec;
  {
    RequestParser p(text);
    p.header_limit(64);
    const std::string wire = "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(60, 'x') + "\r\n\r\n";
    EXPECT_EQ(put(p, wire, ec), 0u);
    EXPECT_EQ(ec, http::error::header_limit);
  }
  RequestParser p(text);
  p.header_limit(64);
  EXPECT_EQ(put(p, "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(60, 'x'), ec), 0u);
  EXPECT_EQ(ec, http::error::header_limit);
}

TEST(MessageParserTest, ABodyPastTheLimitIsRefusedAtTheHead) {
  HeadText text;
  RequestParser p(text);
  p.body_limit(10);
  error_code ec;
  put(p, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n", ec);
  EXPECT_EQ(ec, http::error::body_limit);
}

// A head that comes a byte at a time is found once its last byte is in, and not before.
TEST(MessageParserTest, AHeadInPiecesIsParsedOnceItIsAllIn) {
  HeadText text;
  RequestParser p(text);
  const std::string wire = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
  error_code ec;
  for (std::size_t n = 1; n < wire.size(); ++n) {
    EXPECT_EQ(put(p, wire.substr(0, n), ec), 0u) << n;
    EXPECT_EQ(ec, http::error::need_more) << n;
  }
  EXPECT_EQ(put(p, wire, ec), wire.size());
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p.is_done());
  EXPECT_EQ(p.target(), "/x");
}

TEST(MessageParserTest, EmptyLinesBeforeARequestAreSkipped) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  const std::string wire = "\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n";
  EXPECT_EQ(put(p, wire, ec), wire.size());
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.target(), "/x");
}

TEST(MessageParserTest, ValuesKeepObsTextAndLoseTheWhitespaceAroundThem) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  put(p, "GET / HTTP/1.0\r\nX:\t caf\xc3\xa9 au lait \t\r\nEmpty:\r\n\r\n", ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_EQ(p.fields().size(), 2u);
  EXPECT_EQ(p.fields()[0].value(), "caf\xc3\xa9 au lait");
  EXPECT_EQ(p.fields()[1].value(), "");
}

// RFC 9112 3.2: an HTTP/1.1 request has one Host, whose value is a host; HTTP/1.0 may have none.
// Passed on, a second Host or a bad one lets the upstream read another host than the gateway did.
TEST(MessageParserTest, AHostIsOneAndAHost) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"GET / HTTP/1.1\r\nHost: api.example:8080\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nHost:\r\n\r\n", true},  // empty: allowed
      {"GET / HTTP/1.0\r\n\r\n", true},
      {"GET / HTTP/1.1\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", false},
      {"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: a b/c\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: caf\xc3\xa9.example\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]:8080\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nHost: a:\r\n\r\n", true},  // an empty port: allowed
      {"GET / HTTP/1.1\r\nHost: a:b:c\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: a:http\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: x]:80\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: []:80\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n", false},
  };
  for (const auto& [wire, ok] : cases) {
    HeadText text;
    RequestParser p(text);
    error_code ec;
    put(p, wire, ec);
    if (ok) {
      EXPECT_FALSE(ec) << wire << ": " << ec.message();
    } else {
      EXPECT_EQ(ec, http::error::bad_value) << wire;
    }
  }
}

// A request target is visible ASCII: anything else comes percent-encoded.
TEST(MessageParserTest, ATargetOutsideASCIIIsRefused) {
  for (const std::string target : {"/api/orders/\xc0\xaf", "/caf\xc3\xa9", "/\x80"}) {
    HeadText text;
    RequestParser p(text);
    error_code ec;
    put(p, "GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n", ec);
    EXPECT_EQ(ec, http::error::bad_target) << target;
  }
}

TEST(MessageParserTest, TheSameLengthTwiceIsOneLength) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  put(p, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n", ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.content_length(), 3u);
  EXPECT_FALSE(p.is_done());
}

struct KeepAlive {
  std::string wire;
  bool keep;
};

TEST(MessageParserTest, KeepAliveFollowsTheVersionAndConnection) {
  const KeepAlive cases[] = {
      {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nHost: h\r\nProxy-Connection: close\r\n\r\n", false},
      {"GET / HTTP/1.0\r\n\r\n", false},
      {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
  };
  for (const KeepAlive& c : cases) {
    HeadText text;
    RequestParser p(text);
    error_code ec;
    put(p, c.wire, ec);
    ASSERT_FALSE(ec) << c.wire;
    EXPECT_EQ(p.keep_alive(), c.keep) << c.wire;
  }
}

// RFC 9112 6.3, for responses.
struct Framing {
  std::string wire;
  bool skip;     // the answer to a HEAD request
  bool done;     // no body
  bool chunked;
  bool to_eof;   // the body runs to the connection's end
};

TEST(MessageParserTest, AResponsesBodyIsFramedAsRfc9112Says) {
  const Framing cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, true, false, false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, true, false, false},
      {"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false, true, false, false},
      {"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", false, true, false, false},
      {"HTTP/1.1 100 Continue\r\n\r\n", false, true, false, false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false, false, false, false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, false, true, false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false, false, true, false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", false, false, false, true},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false, false, false, true},
      {"HTTP/1.1 200 OK\r\n\r\n", false, false, false, true},
      {"HTTP/1.1 200\r\n\r\n", false, false, false, true},
  };
  for (const Framing& c : cases) {
    HeadText text;
    ResponseParser p(text);
    p.skip(c.skip);
    error_code ec;
    EXPECT_EQ(put(p, c.wire, ec), c.wire.size()) << c.wire;
    ASSERT_FALSE(ec) << c.wire << ": " << ec.message();
    EXPECT_EQ(p.is_done(), c.done) << c.wire;
    EXPECT_EQ(p.chunked(), c.chunked) << c.wire;
    EXPECT_EQ(!p.keep_alive(), c.to_eof) << c.wire;
  }
}

TEST(MessageParserTest, ABodyToTheConnectionsEndEndsThere) {
  HeadText text;
  ResponseParser p(text);
  error_code ec;
  put(p, "HTTP/1.1 200 OK\r\n\r\n", ec);
  char buf[8];
  p.body().data = buf;
  p.body().size = sizeof buf;
  EXPECT_EQ(put(p, "abc", ec), 3u);
  EXPECT_FALSE(ec);
  EXPECT_FALSE(p.is_done());
  p.put_eof(ec);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(p.is_done());
  EXPECT_EQ(std::string_view(buf, 3), "abc");
}

TEST(MessageParserTest, TheEndOfTheConnectionBeforeTheEndOfAMessageIsAPartialMessage) {
  HeadText text;
  error_code ec;
  {
    RequestParser p(text);
    put(p, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n", ec);
    p.put_eof(ec);
    EXPECT_EQ(ec, http::error::partial_message);
  }
  RequestParser p(text);
  put(p, "GET / HT", ec);
  p.put_eof(ec);
  EXPECT_EQ(ec, http::error::partial_message);
}

TEST(MessageParserTest, MalformedChunkingIsRefused) {
  ChunkedRequest r;
  error_code ec;
  put(r.p, "zz\r\nabc\r\n", ec);
  EXPECT_EQ(ec, http::error::bad_chunk);
}

// A quoted string in a chunk extension that is still open at its line's end (RFC 9112 7.1.1 lets
// none span a line) is refused at once: Beast read on for the closing quote, and the request waited
// for the header timeout (or 16 MiB). A closed one, with a quoted pair in it, is read.
TEST(MessageParserTest, AChunkExtensionQuoteLeftOpenIsRefused) {
  for (const std::string body : {"5;a=\"b\r\nhello\r\n0\r\n\r\n", "1\r\nx\r\n5 ;a=\"b\\\"\r\nhello\r\n0\r\n\r\n"}) {
    ChunkedRequest r;
    error_code ec;
    std::string_view rest = body;
    while (!ec && !r.p.is_done() && !rest.empty()) rest.remove_prefix(put(r.p, rest, ec));
    EXPECT_EQ(ec, http::error::bad_chunk) << body;
  }
  ChunkedRequest r;
  error_code ec;
  std::string_view rest = "5;a=\"b\\\"c\";d=e\r\nhello\r\n0\r\n\r\n";
  while (!ec && !r.p.is_done() && !rest.empty()) rest.remove_prefix(put(r.p, rest, ec));
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(r.p.is_done());
  EXPECT_EQ(r.decoded(), "hello");
}

// Lines of a chunked body that end in a bare LF are refused at once, rather than waited on for a
// CRLF that does not come: a chunk's size line, the line after its data, a trailer. Data may hold
// an LF of its own.
TEST(MessageParserTest, ChunkLinesEndingInABareLFAreRefused) {
  // Feeds the body as a reader would, each time from where the parser stopped: the final error.
  auto body_error = [](const std::string& body, std::string* data = nullptr) {
    ChunkedRequest r;
    error_code ec;
    std::string_view rest = body;
    while (!ec && !r.p.is_done() && !rest.empty()) rest.remove_prefix(put(r.p, rest, ec));
    if (data != nullptr) *data = r.decoded();
    EXPECT_TRUE(r.p.is_done() || ec) << body;
    return ec;
  };
  for (const std::string body : {"5\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n0\nX: a\r\n", "0\r\nX: a\n"}) {
    const error_code ec = body_error(body);
    EXPECT_TRUE(ec && ec != http::error::need_more) << body << ": " << ec.message();
  }
  std::string data;
  EXPECT_FALSE(body_error("5\r\na\nb\nc\r\n0\r\n\r\n", &data));
  EXPECT_EQ(data, "a\nb\nc");

  // A byte at a time, as a reader's buffer holds it (what the parser took goes): a body with LFs in
  // its data, an extension and a trailer is read whole; one whose trailer ends in a bare LF is not.
  auto byte_by_byte = [](const std::string& body, std::string& got) {
    ChunkedRequest r;
    error_code ec;
    std::string buffer;
    for (const char c : body) {
      buffer += c;
      buffer.erase(0, put(r.p, buffer, ec));
      if (ec == http::error::need_more) ec = {};
      if (ec || r.p.is_done()) break;
    }
    got = r.decoded();
    return std::pair{ec, r.p.is_done()};
  };
  const auto [whole_ec, whole_done] = byte_by_byte("3;x=1\r\na\nb\r\n2\r\n\nc\r\n0\r\nX-T: 1\r\n\r\n", data);
  EXPECT_FALSE(whole_ec) << whole_ec.message();
  EXPECT_TRUE(whole_done);
  EXPECT_EQ(data, "a\nb\nc");
  const auto [bad_ec, bad_done] = byte_by_byte("1\r\na\r\n0\r\nX-T: 1\n\r\n", data);
  EXPECT_TRUE(bad_ec && !bad_done) << bad_ec.message();
}

// RFC 9112 6.1: HTTP/1.0 has no Transfer-Encoding.
TEST(MessageParserTest, Http10WithTransferEncodingIsRefusedOrEndsItsConnection) {
  HeadText text;
  error_code ec;
  {
    RequestParser p(text);
    put(p, "POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n", ec);
    EXPECT_EQ(ec, http::error::bad_transfer_encoding);
  }
  ResponseParser p(text);
  put(p, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n", ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(p.chunked());
  EXPECT_FALSE(p.keep_alive());
}

// Beast bounds neither; a client sending trailers without end would grow the buffer without end.
TEST(MessageParserTest, EndlessTrailersAreRefused) {
  ChunkedRequest r;
  error_code ec;
  std::string body = "0\r\n";
  while (body.size() < 70 * 1024) body += "X-Trailer: yes\r\n";
  put(r.p, body, ec);
  EXPECT_EQ(ec, http::error::bad_chunk);
}

TEST(MessageParserTest, ABodyToTheConnectionsEndKeepsToTheBodyLimit) {
  HeadText text;
  ResponseParser p(text);
  p.body_limit(4);
  error_code ec;
  put(p, "HTTP/1.1 200 OK\r\n\r\n", ec);
  ASSERT_FALSE(ec);
  char buf[16];
  p.body().data = buf;
  p.body().size = sizeof buf;
  EXPECT_EQ(put(p, "abc", ec), 3u);
  EXPECT_FALSE(ec);
  put(p, "de", ec);
  EXPECT_EQ(ec, http::error::body_limit);
}

// A keep-alive client that sends a stray CRLF and closes has not begun a request.
TEST(MessageParserTest, EmptyLinesAloneAreNotARequestBegun) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  put(p, "\r\n", ec);
  EXPECT_EQ(ec, http::error::need_more);
  EXPECT_FALSE(p.got_some());
  put(p, "\r\nG", ec);
  EXPECT_TRUE(p.got_some());
}

}  // namespace
}  // namespace sluice::gateway
