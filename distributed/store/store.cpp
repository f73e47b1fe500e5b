// PrefixStore: forwards to the base store with "<prefix>/" in front of every key.
#include "distributed/store/store.h"

#include "core/error.h"

namespace loom::distributed {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  LOOM_CHECK(base_ != nullptr, "PrefixStore: no base store for prefix '", prefix_, "'");
  timeout_ = base_->timeout();
}

std::vector<std::string> PrefixStore::join(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(join(k));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(join(key), value); }
Bytes PrefixStore::get(const std::string& key, Millis timeout) {
  return base_->get(join(key), timeout);
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(join(key), delta);
}
Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  return base_->compare_set(join(key), expected, desired);
}
void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  base_->wait(join(keys), timeout);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(join(keys)); }
bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(join(key)); }
int64_t PrefixStore::num_keys() { return base_->num_keys(); }
std::shared_ptr<Store> PrefixStore::clone() const {
  auto s = std::make_shared<PrefixStore>(prefix_, base_->clone());
  s->set_timeout(timeout_);
  return s;
}

}  // namespace loom::distributed
