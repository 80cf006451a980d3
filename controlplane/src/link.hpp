// A framed message connection on an asio stream socket (TCP between daemons,
// unix between gossamerctl and gossamerd; gossamerctl uses it too).
// Single-threaded: everything runs on one io_context. After a handshake,
// authenticate() turns on the message tags of gossamer/abi/session.hpp for
// every message both ways: no message path above this layer can skip them.
#pragma once

#include <fcntl.h>

#include <array>
#include <deque>
#include <utility>  // before asio: Boost 1.74's awaitable.hpp uses std::exchange
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include <boost/asio.hpp>
#include <gossamer/abi/session.hpp>

#include "proto.hpp"

namespace gossamer::cp {

template <class Socket>
class Link : public std::enable_shared_from_this<Link<Socket>> {
 public:
  // Called per message; may call close() or send().
  using OnMessage = std::function<void(Type, std::string_view body)>;
  // Called once, when the link closes for any reason (never from close() itself
  // synchronously, so the caller's state stays valid while it runs).
  using OnClose = std::function<void(const std::string& why)>;

  Link(Socket s, std::uint32_t max_body) : socket_(std::move(s)), max_body_(max_body) {}

  void start(OnMessage on_message, OnClose on_close) {
    on_message_ = std::move(on_message);
    on_close_ = std::move(on_close);
    read_header();
  }
  void set_max_body(std::uint32_t n) { max_body_ = n; }

  // Called with why, from the event loop, when this layer refuses a
  // message: one whose tag does not verify (injected, replayed, reordered,
  // cut), or, between daemons, one that is not the handshake's before
  // authenticate(). The link then closes (on_close follows as for any close).
  void on_refused(std::function<void(const std::string& why)> f) { refused_ = std::move(f); }
  // From the next message on, both ways, every message carries the tags of
  // gossamer/abi/session.hpp under `keys`, counted from 0 in each direction.
  // Call it where the handshake ends: from on_message (no read is pending,
  // so the next header is read with its tag) and after the last handshake
  // message is queued (it goes without).
  void authenticate(const abi::SessionKeys& keys) {
    send_dir_ = abi::SessionDirection(keys.send);
    receive_dir_ = abi::SessionDirection(keys.receive);
    authenticated_ = true;
  }

  template <class M>
  void send(Type t, const M& m) {
    send_raw(frame(t, encode(m)));
  }
  // A framed message (frame()); tagged here if the link is authenticated.
  void send_raw(std::string bytes) {
    if (closed_) return;
    if (authenticated_) bytes = tag(std::move(bytes));
    queued_bytes_ += bytes.size();
    out_.push_back(std::move(bytes));
    if (out_.size() == 1) write_next();
  }
  // Bytes accepted by send() and not yet written: the caller's back-pressure.
  std::size_t queued_bytes() const { return queued_bytes_; }

  // Closes after the queued messages are written (or at once if `now`).
  void close(const std::string& why, bool now = false) {
    if (closed_) return;
    why_ = why;
    if (now || out_.empty()) {
      shutdown();
    } else {
      closing_ = true;
    }
  }
  bool closed() const { return closed_; }
  Socket& socket() { return socket_; }

  // Ends the link but not the connection (a bulk connection, handed to an
  // application instance): reads no further message, and once the queued
  // ones are written calls `taken`, from the event loop, with the socket as a
  // plain close-on-exec descriptor (>= 3, blocking), or -1 if that failed.
  // Call it from on_message, where no read is pending, so that no byte after
  // the last message is consumed. A write that fails first closes the link
  // as usual (on_close, no `taken`); after the hand-over on_close is never
  // called.
  void hand_over(std::function<void(int fd)> taken) {
    if (closed_ || closing_) return;
    handing_over_ = true;
    taken_ = std::move(taken);
    if (out_.empty()) finish_hand_over();
  }

 private:
  static constexpr std::size_t kTag = abi::kSessionTagBytes;
  static constexpr bool kBetweenDaemons = std::is_same_v<Socket, boost::asio::ip::tcp::socket>;

  // header | header tag | body | body tag, the tags for the next message number.
  std::string tag(std::string framed) {
    const std::string_view header(framed.data(), kHeaderBytes), body(framed.data() + kHeaderBytes,
                                                                      framed.size() - kHeaderBytes);
    const abi::SessionTag h = send_dir_.header_tag(header), b = send_dir_.body_tag(header, body);
    send_dir_.advance();
    std::string out;
    out.reserve(framed.size() + 2 * kTag);
    out.append(header).append(reinterpret_cast<const char*>(h.data()), kTag);
    out.append(body).append(reinterpret_cast<const char*>(b.data()), kTag);
    return out;
  }

  void read_header() {
    auto self = this->shared_from_this();
    const std::size_t n = kHeaderBytes + (authenticated_ ? kTag : 0);
    boost::asio::async_read(socket_, boost::asio::buffer(header_.data(), n),
                            [this, self](boost::system::error_code ec, std::size_t) {
                              if (closed_) return;
                              if (ec) return fail(ec == boost::asio::error::eof ? "closed by the other end"
                                                                                : ec.message());
                              // Authenticate, then parse.
                              const std::string_view header(reinterpret_cast<const char*>(header_.data()),
                                                            kHeaderBytes);
                              if (authenticated_ &&
                                  !abi::SessionDirection::equal(receive_dir_.header_tag(header),
                                                                header_.data() + kHeaderBytes))
                                return refuse(tag_failed("header"));
                              std::uint32_t len;
                              Type t;
                              if (!parse_header(header_.data(), &len, &t)) return fail("malformed header");
                              if (len > max_body_)
                                return fail("message of " + std::to_string(len) + " bytes (limit " +
                                            std::to_string(max_body_) + ")");
                              type_ = t;
                              body_len_ = len;
                              body_.resize(len + (authenticated_ ? kTag : 0));
                              read_body();
                            });
  }
  void read_body() {
    auto self = this->shared_from_this();
    boost::asio::async_read(socket_, boost::asio::buffer(body_),
                            [this, self](boost::system::error_code ec, std::size_t) {
                              if (closed_) return;
                              if (ec) return fail(ec.message());
                              const std::string_view body(body_.data(), body_len_);
                              // Between daemons, only the handshake goes untagged.
                              if (kBetweenDaemons && !authenticated_ && !is_handshake(type_))
                                return refuse("a message of type " + std::to_string(unsigned(type_)) +
                                              " before the handshake ended");
                              if (authenticated_) {
                                const std::string_view header(reinterpret_cast<const char*>(header_.data()),
                                                              kHeaderBytes);
                                if (!abi::SessionDirection::equal(
                                        receive_dir_.body_tag(header, body),
                                        reinterpret_cast<const std::uint8_t*>(body_.data()) + body_len_))
                                  return refuse(tag_failed("body"));
                                receive_dir_.advance();
                              }
                              on_message_(type_, body);
                              if (!closed_ && !closing_ && !handing_over_) read_header();
                            });
  }
  std::string tag_failed(const char* part) const {
    return "message " + std::to_string(receive_dir_.next()) + " (type " +
           std::to_string(unsigned(header_[4] | header_[5] << 8)) + ") failed its " + part +
           " tag: injected, replayed, reordered or cut";
  }
  void refuse(const std::string& why) {
    if (refused_) refused_(why);
    fail(why);
  }
  void write_next() {
    auto self = this->shared_from_this();
    boost::asio::async_write(socket_, boost::asio::buffer(out_.front()),
                             [this, self](boost::system::error_code ec, std::size_t) {
                               if (closed_) return;
                               if (ec) return fail(ec.message());
                               queued_bytes_ -= out_.front().size();
                               out_.pop_front();
                               if (!out_.empty()) return write_next();
                               if (closing_) return shutdown();
                               if (handing_over_) finish_hand_over();
                             });
  }
  void fail(const std::string& why) {
    if (why_.empty()) why_ = why;
    shutdown();
  }
  void shutdown() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
    out_.clear();
    queued_bytes_ = 0;
    // Report from the event loop, not from inside the caller.
    auto self = this->shared_from_this();
    boost::asio::post(socket_.get_executor(), [this, self] {
      if (on_close_) {
        auto cb = std::move(on_close_);
        on_message_ = nullptr;
        cb(why_);
      }
    });
  }

  void finish_hand_over() {
    closed_ = true;
    // release(), not close(): close() leaves the descriptor in the reactor's
    // epoll set, assuming close(2) removes it, which it does not while the
    // duplicate keeps the socket open (events would then reach freed state).
    // release() deregisters it explicitly, and neither calls shutdown(), which
    // would end the connection for the duplicate too.
    boost::system::error_code ec;
    const int raw = socket_.release(ec);
    int fd = -1;
    if (!ec) {
      fd = ::fcntl(raw, F_DUPFD_CLOEXEC, 3);
      ::close(raw);
    }
    // asio made the socket non-blocking; its new owner gets the default mode.
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    out_.clear();
    queued_bytes_ = 0;
    auto self = this->shared_from_this();
    boost::asio::post(socket_.get_executor(), [this, self, fd] {
      on_message_ = nullptr;
      on_close_ = nullptr;
      auto cb = std::move(taken_);
      cb(fd);
    });
  }

  Socket socket_;
  std::uint32_t max_body_;
  std::array<std::uint8_t, kHeaderBytes + abi::kSessionTagBytes> header_{};
  Type type_{};
  std::string body_;
  std::size_t body_len_ = 0;
  bool authenticated_ = false;
  abi::SessionDirection send_dir_, receive_dir_;
  std::function<void(const std::string&)> refused_;
  std::deque<std::string> out_;
  std::size_t queued_bytes_ = 0;
  OnMessage on_message_;
  OnClose on_close_;
  std::function<void(int)> taken_;
  std::string why_;
  bool closed_ = false, closing_ = false, handing_over_ = false;
};

using TcpLink = Link<boost::asio::ip::tcp::socket>;
using UnixLink = Link<boost::asio::local::stream_protocol::socket>;

}  // namespace gossamer::cp
