// Encoding and bounds-checked decoding of the TCP store's messages (Note [Store protocol]).
#include "distributed/store/store_protocol.h"

#include <cstring>

#include "core/error.h"

namespace loom::distributed::wire {

namespace {
uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
}  // namespace

bool is_request(uint8_t t) { return (t >= 1 && t <= 9) || t == uint8_t(Type::Auth); }

const char* type_name(Type t) {
  switch (t) {
    case Type::Set:
      return "set";
    case Type::Get:
      return "get";
    case Type::Add:
      return "add";
    case Type::CompareSet:
      return "compare_set";
    case Type::Wait:
      return "wait";
    case Type::Check:
      return "check";
    case Type::Delete:
      return "delete_key";
    case Type::NumKeys:
      return "num_keys";
    case Type::Ping:
      return "ping";
    case Type::Auth:
      return "auth";
    case Type::Ok:
      return "ok";
    case Type::Timeout:
      return "timeout";
    case Type::Failed:
      return "failed";
  }
  return "?";
}

bool parse_header(const uint8_t* p, Header& h, std::string& why) {
  uint32_t magic = load_u32(p);
  if (magic != kMagic) {
    why = str("bad magic 0x", std::hex, magic);
    return false;
  }
  if (p[4] != kVersion) {
    why = str("protocol version ", int(p[4]), " (this server speaks ", int(kVersion), ")");
    return false;
  }
  h.type = p[5];
  h.length = load_u32(p + 8);
  if (h.length > kMaxPayload) {
    why = str("message of ", h.length, " bytes (the limit is ", kMaxPayload, ")");
    return false;
  }
  return true;
}

Writer::Writer(Type t) {
  buf_.reserve(64);
  u32(kMagic);
  buf_.push_back(kVersion);
  buf_.push_back(uint8_t(t));
  buf_.push_back(0);
  buf_.push_back(0);
  u32(0);  // length, filled by finish()
}

void Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(uint8_t(v >> (8 * i)));
}
void Writer::field(const uint8_t* data, size_t n, const char* what) {
  LOOM_CHECK(n <= kMaxPayload, "store: a ", what, " of ", n, " bytes is over the limit ",
             kMaxPayload);
  u32(uint32_t(n));
  buf_.insert(buf_.end(), data, data + n);
}
Writer& Writer::str(const std::string& s) {
  field(reinterpret_cast<const uint8_t*>(s.data()), s.size(), "field");
  return *this;
}
Writer& Writer::bytes(const Bytes& b) {
  field(b.data(), b.size(), "value");
  return *this;
}
Writer& Writer::i64(int64_t v) {
  for (int i = 0; i < 8; ++i) buf_.push_back(uint8_t(uint64_t(v) >> (8 * i)));
  return *this;
}
Writer& Writer::list(const std::vector<std::string>& keys) {
  LOOM_CHECK(keys.size() <= kMaxKeysPerWait, "store: ", keys.size(), " keys in one call (limit ",
             kMaxKeysPerWait, ")");
  u32(uint32_t(keys.size()));
  for (const auto& k : keys) str(k);
  return *this;
}
const Bytes& Writer::finish() {
  size_t n = buf_.size() - kHeaderBytes;
  LOOM_CHECK(n <= kMaxPayload, "store: a message of ", n, " bytes is over the limit ", kMaxPayload);
  for (int i = 0; i < 4; ++i) buf_[8 + i] = uint8_t(n >> (8 * i));
  return buf_;
}

const uint8_t* Reader::take(size_t k) {
  LOOM_CHECK(k <= n_ - at_, "store: malformed message (a field needs ", k, " bytes, ", n_ - at_,
             " left)");
  const uint8_t* p = p_ + at_;
  at_ += k;
  return p;
}
uint32_t Reader::u32() { return load_u32(take(4)); }
std::string Reader::str(uint32_t max_len) {
  uint32_t len = u32();
  LOOM_CHECK(len <= max_len, "store: malformed message (a key of ", len, " bytes)");
  return std::string(reinterpret_cast<const char*>(take(len)), len);
}
Bytes Reader::bytes() {
  uint32_t len = u32();
  const uint8_t* p = take(len);
  return Bytes(p, p + len);
}
int64_t Reader::i64() {
  const uint8_t* p = take(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return int64_t(v);
}
std::vector<std::string> Reader::list() {
  uint32_t count = u32();
  LOOM_CHECK(count <= kMaxKeysPerWait, "store: malformed message (", count, " keys)");
  std::vector<std::string> keys;
  keys.reserve(count);
  for (uint32_t i = 0; i < count; ++i) keys.push_back(str(kMaxKeyBytes));
  return keys;
}
void Reader::done() const {
  LOOM_CHECK(at_ == n_, "store: malformed message (", n_ - at_, " bytes left over)");
}

Request decode_request(uint8_t type, const uint8_t* p, size_t n) {
  LOOM_CHECK(is_request(type), "store: message type ", int(type), " is not a request");
  Reader r(p, n);
  Request q;
  q.type = Type(type);
  switch (q.type) {
    case Type::Set:
      q.keys.push_back(r.str(kMaxKeyBytes));
      q.value = r.bytes();
      break;
    case Type::Get:
    case Type::Add:
      q.keys.push_back(r.str(kMaxKeyBytes));
      q.number = r.i64();
      break;
    case Type::Wait:
      q.keys = r.list();
      q.number = r.i64();
      break;
    case Type::CompareSet:
      q.keys.push_back(r.str(kMaxKeyBytes));
      q.expected = r.bytes();
      q.value = r.bytes();
      break;
    case Type::Check:
      q.keys = r.list();
      break;
    case Type::Delete:
      q.keys.push_back(r.str(kMaxKeyBytes));
      break;
    case Type::Auth:
      q.token = r.str(kMaxKeyBytes);
      break;
    default:  // NumKeys, Ping: no fields
      break;
  }
  r.done();
  return q;
}

}  // namespace loom::distributed::wire
