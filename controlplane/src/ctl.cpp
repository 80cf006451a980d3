// gossamerctl's unix socket: its requests and the status it asks for.
#include "daemon.hpp"
#include "internal.hpp"

namespace gossamer::cp {

void Daemon::accept_ctl() {
  ctl_acceptor_.async_accept([this](boost::system::error_code ec, asio::local::stream_protocol::socket s) {
    if (shutting_down_) return;
    if (ec) {
      after(kAcceptRetry, [this] { accept_ctl(); });
      return;
    }
    {
      auto link = std::make_shared<UnixLink>(std::move(s), 1u << 20);
      link->start([this, l = link.get()](Type t, std::string_view body) { on_ctl_message(l->shared_from_this(), t, body); },
                  [this, l = link.get()](const std::string&) {
                    // gossamerctl went away (Ctrl-C twice, killed): stop its run.
                    std::vector<std::shared_ptr<Run>> mine;
                    for (auto& [id, r] : runs_)
                      if (r->is_origin && r->ctl.get() == l && !r->done) mine.push_back(r);
                    for (auto& r : mine) {
                      r->ctl.reset();
                      if (!r->started) {
                        abort_before_start(r, 130, "gossamerctl disconnected");
                        continue;
                      }
                      if (!r->failed) fail_run(*r, self_, 4, 130, "gossamerctl disconnected");
                      stop_everywhere(*r, "gossamerctl disconnected");
                    }
                  });
    }
    accept_ctl();
  });
}

void Daemon::on_ctl_message(const std::shared_ptr<UnixLink>& link, Type t, std::string_view body) {
  switch (t) {
    case Type::kCtlStatus:
      link->send(Type::kCtlStatusReply, status());
      link->close("status sent");
      return;
    case Type::kCtlRun: {
      CtlRun m;
      if (!decode(body, m)) break;
      return ctl_run(link, std::move(m));
    }
    case Type::kCtlStop:
      for (auto& [id, r] : runs_)
        if (r->is_origin && r->ctl == link && !r->done) {
          if (!r->started) {
            auto keep = r;
            abort_before_start(keep, 130, "interrupted before the start");
            return;
          }
          if (!r->failed) fail_run(*r, self_, 4, 130, "interrupted: gossamerctl got SIGINT, SIGTERM or SIGHUP");
          stop_everywhere(*r, "interrupted from gossamerctl");
          maybe_finish(r->spec.run);
          return;
        }
      return;
    default:
      break;
  }
  ++protocol_errors_;
  CtlDone d;
  d.status = 2;
  d.message = "gossamerd: malformed request (type " + std::to_string(unsigned(t)) + ")";
  link->send(Type::kCtlDone, d);
  link->close("malformed request");
}

StatusReply Daemon::status() const {
  StatusReply s;
  s.self = self_;
  const auto now = Clock::now();
  for (std::uint32_t h = 0; h < hosts_; ++h) {
    HostStatus hs;
    hs.index = h;
    hs.name = cfg_.rack.hosts[h].name;
    if (h == self_) {
      hs.state = "self";
      hs.dataplane = std::uint8_t(dataplane_state_);
      hs.dataplane_restarts = dataplane_restarts_;
      hs.instances = local_instances();
    } else {
      const auto& p = peers_[h];
      hs.state = p.up ? "up" : "down";
      if (p.last_heard != Clock::time_point{})
        hs.heartbeat_ms =
            std::int32_t(std::chrono::duration_cast<std::chrono::milliseconds>(now - p.last_heard).count());
      hs.dataplane = p.last.dataplane;
      hs.dataplane_restarts = p.last.dataplane_restarts;
      hs.instances = p.last.instances;
    }
    s.hosts.push_back(std::move(hs));
  }
  for (const auto& [id, r] : runs_) {
    RunStatus rs;
    rs.run = id;
    rs.path = r->spec.path;
    rs.threads = r->spec.threads;
    rs.origin = r->spec.origin;
    rs.state = !r->started ? "preparing" : r->stopping ? "stopping" : (r->pid && !r->reaped) ? "running" : "finishing";
    rs.pid = r->reaped ? 0 : r->pid;
    s.runs.push_back(std::move(rs));
  }
  return s;
}

}  // namespace gossamer::cp
