// Several ports as one (port_multi.hpp).
#include "port_multi.hpp"

#include <algorithm>
#include <cstring>

namespace gossamer::dataplane {

std::string MultiPort::make(std::vector<std::unique_ptr<Port>> links, std::vector<std::uint16_t> link_of_peer,
                            std::unique_ptr<MultiPort>* out) {
  if (links.empty()) return "no port";
  if (links.size() > kMaxLinks)
    return std::to_string(links.size()) + " ports; a dataplane serves at most " + std::to_string(kMaxLinks);
  std::vector<char> listed(link_of_peer.size(), 0);
  for (std::size_t h = 0; h < link_of_peer.size(); ++h)
    if (link_of_peer[h] == kNoLink) link_of_peer[h] = 0;
    else if ((listed[h] = 1) && link_of_peer[h] >= links.size())
      return "host " + std::to_string(h) + " is reached through port " + std::to_string(link_of_peer[h]) + " of " +
             std::to_string(links.size());
  std::unique_ptr<MultiPort> m(new MultiPort);
  m->queues_ = links[0]->queues();
  for (std::size_t i = 0; i < links.size(); ++i) {
    if (links[i]->queues() != m->queues_)
      return "port " + std::to_string(i) + " has " + std::to_string(links[i]->queues()) + " queues, port 0 " +
             std::to_string(m->queues_);
    m->macs_.push_back(links[i]->mac());
    m->own_mac_.push_back(m->macs_[i] != m->macs_[0]);
  }
  m->links_ = std::move(links);
  m->link_of_peer_ = std::move(link_of_peer);
  m->listed_ = std::move(listed);
  m->q_ = std::make_unique<Queue[]>(m->queues_);
  *out = std::move(m);
  return "";
}

MultiPort::Frames MultiPort::frames(std::size_t link) const {
  Frames f;
  for (std::uint16_t q = 0; q < queues_; ++q) {
    f.rx += q_[q].rx[link].load(std::memory_order_relaxed);
    f.tx += q_[q].tx[link].load(std::memory_order_relaxed);
  }
  return f;
}

Port::DeviceErrors MultiPort::device_errors() const {
  DeviceErrors sum;
  for (const auto& l : links_) {
    const DeviceErrors e = l->device_errors();
    sum.rx_missed += e.rx_missed;
    sum.rx_errors += e.rx_errors;
    sum.rx_no_buffer += e.rx_no_buffer;
    sum.tx_errors += e.tx_errors;
  }
  return sum;
}

std::vector<int> MultiPort::rx_wake_fds(std::uint16_t q) const {
  std::vector<int> fds;
  for (const auto& l : links_) {
    const int fd = l->rx_wake_fd(q);
    if (fd < 0) return {};
    fds.push_back(fd);
  }
  return fds;
}

std::uint16_t MultiPort::rx_burst(std::uint16_t q, Frame* out, std::uint16_t n) {
  Queue& s = q_[q];
  const std::size_t nl = links_.size();
  if (nl == 1) {
    const std::uint16_t got = links_[0]->rx_burst(q, out, n);
    if (got) add(s.rx[0], got);
    return got;
  }
  std::uint16_t got = 0;
  const std::size_t start = s.next;
  for (std::size_t k = 0; k < nl && got < n; ++k) {
    const std::size_t l = (start + k) % nl;
    if (const std::uint16_t r = links_[l]->rx_burst(q, out + got, std::uint16_t(n - got)); r) {
      add(s.rx[l], r);
      got = std::uint16_t(got + r);
    }
  }
  s.next = std::uint16_t((start + 1) % nl);
  return got;
}

std::uint16_t MultiPort::send(std::uint16_t q, std::size_t link, Frame* frames, std::uint16_t n) {
  if (own_mac_[link])
    for (std::uint16_t i = 0; i < n; ++i)
      if (frames[i].len >= 12) std::memcpy(frames[i].data + 6, macs_[link].data(), 6);
  const std::uint16_t sent = links_[link]->tx_burst(q, frames, n);
  if (sent) add(q_[q].tx[link], sent);
  return sent;
}

// Frames for several links: each link gets its own in one burst, in their
// order; the array is rewritten with the frames taken first.
std::uint16_t MultiPort::tx_burst(std::uint16_t q, Frame* frames, std::uint16_t n) {
  if (links_.size() == 1) return send(q, 0, frames, n);
  constexpr std::uint16_t kMax = 64;
  n = std::min(n, kMax);
  std::uint8_t link[kMax];
  bool one = true;
  for (std::uint16_t i = 0; i < n; ++i) {
    link[i] = std::uint8_t(link_of(frames[i].peer));
    one &= link[i] == link[0];
  }
  if (one) return n ? send(q, link[0], frames, n) : 0;
  Frame taken[kMax], left[kMax], batch[kMax];
  std::uint16_t ntaken = 0, nleft = 0;
  std::uint64_t done = 0;  // links already sent on
  for (std::uint16_t i = 0; i < n; ++i) {
    const std::uint8_t l = link[i];
    if (done >> l & 1) continue;
    done |= std::uint64_t(1) << l;
    std::uint16_t m = 0;
    for (std::uint16_t j = i; j < n; ++j)
      if (link[j] == l) batch[m++] = frames[j];
    const std::uint16_t sent = send(q, l, batch, m);
    for (std::uint16_t j = 0; j < m; ++j) (j < sent ? taken[ntaken++] : left[nleft++]) = batch[j];
  }
  std::copy(taken, taken + ntaken, frames);
  std::copy(left, left + nleft, frames + ntaken);
  return ntaken;
}

bool MultiPort::rx_wake_arm(std::uint16_t q, bool quiet) {
  // Every link, even after one could not be armed (a memif link that is
  // not armed still clears its word and drains its doorbell).
  bool all = true;
  for (auto& l : links_) all &= l->rx_wake_arm(q, quiet);
  return all;
}

std::uint64_t MultiPort::rx_due(std::uint16_t q) const {
  std::uint64_t due = UINT64_MAX;
  for (const auto& l : links_) due = std::min(due, l->rx_due(q));
  return due;
}

std::string MultiPort::describe() const {
  if (links_.size() == 1) return links_[0]->describe();
  std::string s = std::to_string(links_.size()) + " ports (";
  for (std::size_t i = 0; i < links_.size(); ++i) {
    std::string peers;
    for (std::size_t h = 0; h < link_of_peer_.size(); ++h)
      if (listed_[h] && link_of_peer_[h] == i) peers += (peers.empty() ? "" : ", ") + std::to_string(h);
    s += (i ? "; " : "") + std::to_string(i) + " to host" + (peers.find(',') == std::string::npos ? " " : "s ") +
         (peers.empty() ? "none" : peers) + ": " + links_[i]->describe();
  }
  s += ")";
  return s;
}

}  // namespace gossamer::dataplane
