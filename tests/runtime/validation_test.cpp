// The trustee validates every record before running anything: unknown
// invoker ids, stale or mistyped property handles and short bodies get an
// error response, and the trustee keeps serving. These records are built
// with the runtime's own encoder (detail::RecordWriter) and travel the real
// channel, as records written by a buggy or hostile sender would.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include <gossamer/gossamer.hpp>

namespace {

using gossamer::detail::Completion;
using gossamer::detail::PropertyHandle;
using gossamer::detail::RecordWriter;
namespace abi = gossamer::abi;

struct Outcome {
  bool done = false;
  std::uint32_t status = 0xffff;
};

void record_outcome(Completion& c, std::uint32_t status, const std::byte*, std::uint32_t) {
  auto* o = c.context<Outcome*>();
  o->done = true;
  o->status = status;
}

// Sends one raw record to trustee 1; `body` bytes follow the header.
void send_raw(std::uint32_t invoker, PropertyHandle prop, const void* body, std::size_t len,
              Outcome* out) {
  RecordWriter w(1, invoker, prop);
  if (len) w.append(body, len);
  w.close(Completion::make(&record_outcome, out));  // records the length, then pads
}

TEST(TrusteeValidationTest, BadRecordsGetErrorsAndTheTrusteeKeepsServing) {
  gossamer::run(2, [] {
    // In a fresh run, trustee 1's table hands out index 0 then 1, generation 1.
    auto text = gossamer::trustee(1).entrust(std::string("seven"));
    auto number = gossamer::trustee(1).entrust(7);
    const PropertyHandle text_handle = PropertyHandle::make(0, 1);
    const PropertyHandle number_handle = PropertyHandle::make(1, 1);

    auto read = [](int& x) { return x; };
    using Read = decltype(read);
    const std::uint32_t read_int =
        gossamer::detail::Invoker<&gossamer::detail::apply_invoke<int, Read>, int>::id();
    ASSERT_GE(read_int, std::uint32_t(abi::kFirstUserInvoker));
    const std::uint64_t closure = 0;  // Read captures nothing: its bytes are padding

    Outcome ok, unknown, wrong_type, stale, short_body, bad_toggle, bad_token;
    send_raw(read_int, number_handle, &closure, sizeof closure, &ok);           // control
    send_raw(0x7fff, number_handle, &closure, sizeof closure, &unknown);        // no such id
    send_raw(read_int, text_handle, &closure, sizeof closure, &wrong_type);     // a string, not an int
    send_raw(read_int, PropertyHandle::make(1, 99), &closure, sizeof closure, &stale);
    send_raw(read_int, PropertyHandle::make(5000, 1), &closure, sizeof closure, &stale);
    send_raw(read_int, number_handle, nullptr, 0, &short_body);                 // no closure bytes
    const std::uint32_t three = 3;
    send_raw(abi::kBuiltinToggleRef, number_handle, &three, 3, &bad_toggle);    // not a u64 id
    const std::uint64_t token[2] = {0xdeadbeefull << 32 | 77, 0};
    send_raw(abi::kBuiltinComplete, {}, token, sizeof token, &bad_token);       // unknown token

    for (Outcome* o : {&ok, &unknown, &wrong_type, &stale, &short_body, &bad_toggle, &bad_token})
      while (!o->done) gossamer::yield();

    EXPECT_EQ(ok.status, abi::kOk);
    EXPECT_EQ(unknown.status, abi::kBadInvoker);
    EXPECT_EQ(wrong_type.status, abi::kWrongType);
    EXPECT_EQ(stale.status, abi::kStaleProperty);
    EXPECT_EQ(short_body.status, abi::kMalformed);
    EXPECT_EQ(bad_toggle.status, abi::kMalformed);
    EXPECT_EQ(bad_token.status, abi::kOk);  // answered, and the stray completion dropped

    // Nothing was touched, and the trustee still serves.
    EXPECT_EQ(number.apply([](int& x) { return x; }), 7);
    EXPECT_EQ(text.apply([](std::string& s) { return s; }), "seven");
  });
}

}  // namespace
