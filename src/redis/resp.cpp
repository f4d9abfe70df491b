#include "redis/resp.h"

#include <array>
#include <cassert>
#include <charconv>

namespace sluice::redis::detail {

namespace {

void append_number(std::string& out, std::int64_t n) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, n);
  out.append(buf, r.ptr);
}

// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
constexpr std::array<std::uint16_t, 256> make_crc_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    table[i] = crc;
  }
  return table;
}

constexpr auto kCrcTable = make_crc_table();

std::uint16_t crc16(std::string_view s) {
  std::uint16_t crc = 0;
  for (const char c : s) {
    crc = static_cast<std::uint16_t>((crc << 8) ^
                                     kCrcTable[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]);
  }
  return crc;
}

}  // namespace

Command::Command(std::size_t args) : left_(args) {
  out_.reserve(32 + args * 24);
  out_.push_back('*');
  append_number(out_, static_cast<std::int64_t>(args));
  out_.append("\r\n");
}

Command& Command::arg(std::string_view s) {
  assert(left_ > 0);
  --left_;
  out_.push_back('$');
  append_number(out_, static_cast<std::int64_t>(s.size()));
  out_.append("\r\n");
  out_.append(s);
  out_.append("\r\n");
  return *this;
}

Command& Command::arg(std::int64_t n) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, n);
  return arg(std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

std::string Command::take() && {
  assert(left_ == 0);
  return std::move(out_);
}

std::string encode(std::initializer_list<std::string_view> args) {
  Command c(args.size());
  for (const std::string_view a : args) c.arg(a);
  return std::move(c).take();
}

int key_slot(std::string_view key) {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16(key) & (kSlots - 1);
}

}  // namespace sluice::redis::detail
