// libFuzzer harness: the TCP store's message parser (distributed/store/store_protocol.h) on an
// arbitrary byte stream, read the way the server reads a connection: header, then payload, then
// decode_request. Every decoded request must encode back to exactly the bytes it came from; every
// other message must be refused with loom::Error (or a false parse_header), never a crash.
// Leaves out: sockets and the server's key table (tests/distributed/store/test_store.cpp).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "distributed/store/store_protocol.h"

using namespace loom::distributed;
using wire::Type;

namespace {
loom::distributed::Bytes encode(const wire::Request& q) {
  wire::Writer w(q.type);
  switch (q.type) {
    case Type::Set:
      w.str(q.keys[0]).bytes(q.value);
      break;
    case Type::Get:
    case Type::Add:
      w.str(q.keys[0]).i64(q.number);
      break;
    case Type::Wait:
      w.list(q.keys).i64(q.number);
      break;
    case Type::CompareSet:
      w.str(q.keys[0]).bytes(q.expected).bytes(q.value);
      break;
    case Type::Check:
      w.list(q.keys);
      break;
    case Type::Delete:
      w.str(q.keys[0]);
      break;
    case Type::Auth:
      w.str(q.token);
      break;
    default:
      break;
  }
  return w.finish();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  while (size - at >= wire::kHeaderBytes) {
    wire::Header h;
    std::string why;
    if (!wire::parse_header(data + at, h, why)) {
      if (why.empty()) std::abort();  // a refusal always says why
      break;
    }
    if (h.length > wire::kMaxPayload) std::abort();
    if (size - at - wire::kHeaderBytes < h.length) break;  // the rest has not arrived
    const uint8_t* payload = data + at + wire::kHeaderBytes;
    try {
      wire::Request q = wire::decode_request(h.type, payload, h.length);
      Bytes back = encode(q);
      // Header bytes 6-7 are reserved (ignored on read); everything else must round-trip.
      if (back.size() != wire::kHeaderBytes + h.length ||
          std::memcmp(back.data(), data + at, 6) != 0 ||
          std::memcmp(back.data() + 8, data + at + 8, back.size() - 8) != 0)
        std::abort();
    } catch (const loom::Error&) {
    }
    // The client reads replies with the same Reader: any payload either decodes or throws.
    try {
      wire::Reader r(payload, h.length);
      (void)r.bytes();
      (void)r.i64();
      r.done();
    } catch (const loom::Error&) {
    }
    at += wire::kHeaderBytes + h.length;
  }
  return 0;
}
