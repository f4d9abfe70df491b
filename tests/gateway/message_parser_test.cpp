// The data plane's parser: the head as it came, kept in text a connection reuses, and the body
// written to the caller's buffer.
#include "gateway/message_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
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

TEST(MessageParserTest, ARequestsHeadIsKeptAsItCame) {
  HeadText text;
  RequestParser p(text);
  p.eager(false);
  error_code ec;
  const std::string wire = "PATCH /api/orders/7?x=1 HTTP/1.1\r\nHost: a\r\nx-USER-id:  42 \r\nHost: b\r\n\r\n";
  EXPECT_EQ(put(p, wire, ec), wire.size());
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(p.is_header_done());
  EXPECT_EQ(p.method(), http::verb::patch);
  EXPECT_EQ(p.method_string(), "PATCH");
  EXPECT_EQ(p.target(), "/api/orders/7?x=1");
  using Fields = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(fields_of(p.fields()), (Fields{{"Host", "a"}, {"x-USER-id", "42"}, {"Host", "b"}}));
  EXPECT_EQ(p.fields()[0].name(), http::field::host);
  EXPECT_EQ(p.fields()[1].name(), http::field::unknown);
}

TEST(MessageParserTest, AnUnknownMethodKeepsItsName) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  put(p, "BREW /pot HTTP/1.1\r\n\r\n", ec);
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
    put(p, "GET /a HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", ec);
    ASSERT_FALSE(ec);
    ASSERT_EQ(p.fields().size(), 2u);
  }
  RequestParser p(text);
  std::string wire = "GET /b HTTP/1.1\r\n";
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
  put(p, "GET /q HTTP/1.1\r\nA: 1\r\nB C: 2\r\n\r\n", ec);
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
  const std::string head = "POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\n";
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
  const std::string wire = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
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
  const std::string head = "POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\n";
  put(p, head, ec);
  EXPECT_EQ(put(p, "ab", ec), 0u);
  EXPECT_EQ(ec, http::error::need_buffer);
  EXPECT_FALSE(p.is_done());
}

// Framing errors are Beast's, unchanged: two different lengths are refused.
TEST(MessageParserTest, ConflictingLengthsAreRefused) {
  HeadText text;
  RequestParser p(text);
  error_code ec;
  put(p, "POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab", ec);
  EXPECT_EQ(ec, http::error::multiple_content_length);
}

}  // namespace
}  // namespace sluice::gateway
