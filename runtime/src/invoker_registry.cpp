#include "invoker_registry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace gossamer::detail {

namespace {
struct Registration {
  InvokeFn fn;
  std::uint64_t type;
  std::uint32_t* id_out;
};

std::vector<Registration>& registrations() {
  static std::vector<Registration> r;  // filled during static initialisation
  return r;
}
}  // namespace

std::uint32_t register_invoker(InvokeFn fn, std::uint64_t property_type, std::uint32_t* id_out) {
  registrations().push_back({fn, property_type, id_out});
  return abi::kBuiltinInvalid;  // until gossamer::run assigns ids
}

std::vector<InvokerEntry> finalize_invokers() {
  struct Keyed {
    std::string module;
    std::uintptr_t offset;
    Registration reg;
  };
  std::vector<Keyed> keyed;
  for (const Registration& r : registrations()) {
    Dl_info info{};
    auto addr = reinterpret_cast<std::uintptr_t>(r.fn);
    std::string module;
    std::uintptr_t base = 0;
    if (::dladdr(reinterpret_cast<void*>(r.fn), &info) && info.dli_fname) {
      module = info.dli_fname;
      base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    }
    keyed.push_back({module, addr - base, r});
  }
  std::sort(keyed.begin(), keyed.end(), [](const Keyed& a, const Keyed& b) {
    return a.module != b.module ? a.module < b.module : a.offset < b.offset;
  });
  std::vector<InvokerEntry> table;
  table.reserve(keyed.size());
  for (std::size_t i = 0; i < keyed.size(); ++i) {
    *keyed[i].reg.id_out = abi::kFirstUserInvoker + std::uint32_t(i);
    table.push_back({keyed[i].reg.fn, keyed[i].reg.type});
  }
  return table;
}

}  // namespace gossamer::detail
