#include "app.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace gossamer::dataplane {

std::string check_attach(const void* msg, std::size_t msg_len, const abi::SegmentHeader& hdr,
                         const AttachCheck& c, abi::SegmentLayout* layout) {
  if (msg_len != sizeof(abi::AttachRequest))
    return "attach message has " + std::to_string(msg_len) + " bytes, expected " +
           std::to_string(sizeof(abi::AttachRequest)) + " (a different libgossamer version?)";
  abi::AttachRequest r;
  std::memcpy(&r, msg, sizeof r);
  if (r.type != abi::kMsgAttach) return "first message is not an attach request";
  if (r.attach_version != abi::kAttachVersion)
    return "attach contract version " + std::to_string(r.attach_version) +
           " is not the dataplane's " + std::to_string(abi::kAttachVersion) +
           " (rebuild the application against this libgossamer)";
  if (r.slot_layout != abi::kLayoutVersion)
    return "slot layout version " + std::to_string(r.slot_layout) + " is not the dataplane's " +
           std::to_string(abi::kLayoutVersion) + " (rebuild the application against this libgossamer)";
  if (r.build_id_len == 0 || r.build_id_len > abi::kMaxBuildId)
    return "the executable has no GNU build-id (link with --build-id)";
  const std::size_t id_len = ::strnlen(r.run_id, sizeof r.run_id);
  for (std::size_t i = 0; i < id_len; ++i)
    if (r.run_id[i] < 0x20 || r.run_id[i] > 0x7e)
      return "the run id (GOSSAMER_RUN_ID) has a byte that is not printable ASCII";
  const std::size_t token_len = ::strnlen(r.run_token, sizeof r.run_token);
  if (token_len != 0 && token_len != sizeof r.run_token)
    return std::string("the run token (") + abi::kRunTokenEnv + ") is not " + std::to_string(sizeof r.run_token) +
           " hex digits";
  if (c.host_count == 0 || c.host_index >= c.host_count) return "the dataplane's rack is empty";
  if (c.fds != 2) return "attach needs exactly two descriptors (memfd, eventfd)";
  if (!c.sealed) return "the segment memfd is not sealed against shrinking and growing";
  if (r.total_threads == 0 || r.total_threads > abi::kMaxRackThreads)
    return "thread count " + std::to_string(r.total_threads) + " out of range";
  if (r.total_threads < c.host_count)
    return "a rack of " + std::to_string(c.host_count) + " hosts needs at least as many threads, got " +
           std::to_string(r.total_threads);
  std::uint32_t first, count;
  abi::host_threads(r.total_threads, c.host_count, c.host_index, &first, &count);
  if (!abi::segment_layout(r.total_threads, count, layout)) return "bad thread counts";
  if (c.segment_size != layout->bytes || r.segment_bytes != layout->bytes)
    return "segment is " + std::to_string(c.segment_size) + " bytes, expected " +
           std::to_string(layout->bytes);
  if (hdr.magic != abi::kSegmentMagic) return "segment header has a bad magic number";
  if (hdr.attach_version != abi::kAttachVersion || hdr.slot_layout != abi::kLayoutVersion)
    return "segment header versions differ from the attach message";
  if (hdr.segment_bytes != layout->bytes || hdr.total_threads != r.total_threads ||
      hdr.first_thread != first || hdr.local_threads != count ||
      hdr.host_index != c.host_index || hdr.host_count != c.host_count ||
      hdr.doorbell_entries != layout->doorbell_entries ||
      hdr.request_primary != layout->request_primary ||
      hdr.response_primary != layout->response_primary ||
      hdr.request_overflow != layout->request_overflow ||
      hdr.response_overflow != layout->response_overflow || hdr.wake_words != layout->wake_words ||
      hdr.doorbells != layout->doorbells || hdr.doorbell_stride != layout->doorbell_stride ||
      hdr.counters != layout->counters)
    return "segment header does not match the layout for " + std::to_string(r.total_threads) +
           " threads on host " + std::to_string(c.host_index) + " of " + std::to_string(c.host_count) +
           " (is GOSSAMER_CONFIG the same file the dataplane uses?)";
  return "";
}

std::string claim_run(const abi::AttachRequest& r, std::uint32_t host, const RunTokens& tokens, RunClaim* out) {
  RunClaim c;
  c.id.assign(r.run_id, ::strnlen(r.run_id, sizeof r.run_id));
  const std::string_view token(r.run_token, ::strnlen(r.run_token, sizeof r.run_token));
  const std::string env = abi::kRunTokenEnv;
  if (!c.id.starts_with(abi::kIssuedRunPrefix)) {
    if (!token.empty())
      return "a run token (" + env + ") comes only with a run id gossamerd issued (" + abi::kIssuedRunPrefix +
             "...), not with '" + c.id + "'";
    c.key = (c.id.empty() ? hash_build_id(r.build_id, std::min<std::size_t>(r.build_id_len, abi::kMaxBuildId))
                          : hash_run_id(c.id)) &
            ~kIssuedRunBit;
  } else {
    if (token.empty())
      return "run " + c.id + " was started by gossamerd: only its own instances, which have the run's token (" +
             env + "), may attach to it";
    if (!tokens.has_secret())
      return "this dataplane has no rack secret (controlplane.psk_file) to check run tokens with";
    RunToken t{};
    if (!RunTokens::from_hex(token, &t) || !tokens.verify(c.id, host, t))
      return "the run token (" + env + ") is not the one gossamerd issued for run " + c.id + " on this host";
    c.key = hash_run_id(c.id) | kIssuedRunBit;
    c.issued = true;
  }
  *out = std::move(c);
  return "";
}

void App::wake_thread(std::uint32_t local_i) {
  // The thread announced its sleep with 1 (seq_cst) and re-checked its
  // slots; our slot write is published, so fence and look (Dekker).
  std::atomic_ref<std::uint32_t> w(*wake_word(local_i));
#if defined(__SANITIZE_THREAD__)
  if (w.fetch_or(0, std::memory_order_seq_cst)) {  // TSan has no fences
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (w.load(std::memory_order_relaxed)) {
#endif
    w.store(0, std::memory_order_relaxed);
    ::syscall(SYS_futex, wake_word(local_i), FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

std::uint64_t hash_build_id(const std::uint8_t* id, std::size_t len) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (std::size_t i = 0; i < len; ++i) h = (h ^ id[i]) * 1099511628211ull;
  return h;
}

std::uint64_t hash_run_id(std::string_view id) {
  return hash_build_id(reinterpret_cast<const std::uint8_t*>(id.data()), id.size());
}

}  // namespace gossamer::dataplane
