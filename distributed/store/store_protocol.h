// The TCP store's wire format: a fixed header (magic, version, type, payload length) and a payload
// of length-prefixed fields; the encoder and a bounds-checked decoder. See Note [Store protocol].
// Leaves out: sockets and the token check itself (distributed/store/tcp_store*.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace loom::distributed::wire {

// Note [Store protocol]
// Every message, in both directions, is a 12-byte header followed by `length` payload bytes:
//   u32 magic = 0x4D4F4F4C ("LOOM" little-endian), u8 version = 1, u8 type, u16 reserved = 0,
//   u32 length (<= kMaxPayload).
// All integers are little-endian. Payload fields: a string/bytes is u32 length + bytes; an
// integer is i64; a list is u32 count + items. Requests (client -> server):
//   Set(key, value) -> Ok          Get(key, i64 timeout_ms) -> Ok(value) | Timeout
//   Add(key, i64 delta) -> Ok(i64)  CompareSet(key, expected, desired) -> Ok(value)
//   Wait(list keys, i64 timeout_ms) -> Ok | Timeout    Check(list keys) -> Ok(i64 0/1)
//   Delete(key) -> Ok(i64 0/1)      NumKeys() -> Ok(i64)    Ping() -> Ok
//   Auth(token) -> Ok | Failed
// A reply's type is Ok, Timeout or Failed(string message). Auth is the shared-token handshake
// (LOOM_STORE_TOKEN, Note [Store token] in tcp_store_server.cpp): a server started with a token
// answers Failed to any first message other than Auth with that token, and closes the
// connection; a server without one answers Failed to Auth. The server closes a connection (and only
// that one) whose header has the wrong magic/version/type, whose length is over the limit, whose
// payload does not decode exactly, or that stops mid-message for longer than kStallTimeout.
constexpr uint32_t kMagic = 0x4D4F4F4C;
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 12;
constexpr uint32_t kMaxPayload = 64u << 20;  // 64 MiB: values are ids and small metadata
constexpr uint32_t kMaxKeyBytes = 64u << 10;
constexpr uint32_t kMaxKeysPerWait = 1u << 16;
constexpr int kStallTimeoutMs = 30000;

enum class Type : uint8_t {
  Set = 1,
  Get = 2,
  Add = 3,
  CompareSet = 4,
  Wait = 5,
  Check = 6,
  Delete = 7,
  NumKeys = 8,
  Ping = 9,
  Auth = 32,
  Ok = 128,
  Timeout = 129,
  Failed = 130,
};
bool is_request(uint8_t t);
const char* type_name(Type t);

struct Header {
  uint8_t type = 0;
  uint32_t length = 0;
};
// Decodes the 12 header bytes; false (with `why`) for a bad magic, version, type or length.
bool parse_header(const uint8_t* p, Header& h, std::string& why);

// One request, decoded and checked: what the server acts on. The fuzz harness
// tests/fuzz/store_protocol_fuzz.cpp feeds arbitrary bytes through parse_header and this.
struct Request {
  Type type = Type::Ping;
  std::vector<std::string> keys;  // Set/Get/Add/CompareSet/Delete: one key; Wait/Check: the list
  Bytes value;                    // Set: the value; CompareSet: the desired value
  Bytes expected;                 // CompareSet
  int64_t number = 0;             // Get/Wait: timeout in ms; Add: the delta
  std::string token;              // Auth
};
// Decodes the payload of a request of type `type` (n bytes at p): throws loom::Error when `type`
// is not a request or the payload does not decode exactly.
Request decode_request(uint8_t type, const uint8_t* p, size_t n);

// Builds one message: header + fields.
class Writer {
 public:
  explicit Writer(Type t);
  Writer& str(const std::string& s);
  Writer& bytes(const Bytes& b);
  Writer& i64(int64_t v);
  Writer& list(const std::vector<std::string>& keys);
  const Bytes& finish();  // fills in the length; the message is ready to send

 private:
  void u32(uint32_t v);
  // Appends n bytes after their length; `what` names the field in the over-the-limit error.
  void field(const uint8_t* data, size_t n, const char* what);
  Bytes buf_;
};

// Reads fields from one payload; every read checks bounds and throws loom::Error on malformed
// input. done() checks that nothing is left over.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  std::string str(uint32_t max_len = kMaxPayload);
  Bytes bytes();
  int64_t i64();
  std::vector<std::string> list();
  void done() const;

 private:
  uint32_t u32();
  const uint8_t* take(size_t k);  // the next k bytes, past which it moves; an error past the end
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

}  // namespace loom::distributed::wire
