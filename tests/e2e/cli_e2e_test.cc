// The abx binary as a user runs it, against the real abxd with real sandboxes: `exec` with
// stdin (-i), a terminal (-t), environment and --json; `files cp` of directory trees both ways.
// Needs root (abxd). Each test's abx gets its own empty HOME, so nothing of the machine's
// ~/.abx is read.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "abx/http/client.h"
#include "abx/testing/abxd.h"
#include "abx/testing/rootfs.h"
#include "abx/testing/temp_dir.h"

namespace abx {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

struct Out {
  int code = -1;
  std::string out, err;
};

// Runs `argv` with `env` added, `input` on its stdin (then EOF), and stdout and stderr captured
// apart.
Out run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                const std::string& input) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    // Only what the test says: none of the machine's abx configuration.
    for (const char* v : {"ABX_API_KEY", "E2B_API_KEY", "ABX_API_URL", "E2B_API_URL", "ABX_HOME",
                          "ABX_ACCESS_KEY_ID", "ABX_SECRET_ACCESS_KEY", "ABX_ACCESS_TOKEN"})
      unsetenv(v);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  std::thread feeder([fd = in[1], input] {
    std::string_view d = input;
    while (!d.empty()) {
      ssize_t n = write(fd, d.data(), d.size());
      if (n <= 0) break;
      d.remove_prefix(static_cast<std::size_t>(n));
    }
    close(fd);
  });
  Out r;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (open_fds > 0 && std::chrono::steady_clock::now() < deadline) {
    if (poll(fds, 2, 1000) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  feeder.join();
  int st = 0;
  if (open_fds > 0) kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

class CliE2E : public testing::AbxdFixture {
 protected:
  CliE2E() : AbxdFixture("abx-cli-e2e") {}
  // Templates whose programs print: a start command over a few seconds, and a command server
  // that fails at once (and is restarted with backoff).
  void prepare_home(const fs::path& home) override {
    fs::create_directories(home / "templates" / "talk");
    std::ofstream(home / "templates" / "talk" / "template.yaml") << R"(id: talk
start: "echo hello from start; echo oops >&2; for i in 1 2 3; do sleep 1; echo tick $i; done"
)";
    fs::create_directories(home / "templates" / "crash");
    std::ofstream(home / "templates" / "crash" / "template.yaml") << R"(id: crash
server:
  command: "echo 'fatal: cannot bind port 49982' >&2; exit 3"
  port: 49982
)";
    // Serves (abx-server on its port), then dies after a second; every restart then fails.
    fs::create_directories(home / "templates" / "flaky");
    std::ofstream(home / "templates" / "flaky" / "template.yaml") << R"(id: flaky
server:
  command: "if [ -e /tmp/.served ]; then echo 'fatal: cannot bind port 49982' >&2; exit 3; fi; touch /tmp/.served; /opt/abx/bin/abx-server --port 49982 & sleep 1; exit 3"
  port: 49982
)";
    // Starts and never listens on the port it declares.
    fs::create_directories(home / "templates" / "deaf");
    std::ofstream(home / "templates" / "deaf" / "template.yaml") << R"(id: deaf
server:
  command: "echo listening somewhere else; exec sleep 600"
  port: 49982
)";
    // Images without bash (issue 38): busybox; alpine-like (musl + busybox's sh); musl with a
    // program and no shell at all. One layer each, as `rootfs:` directories.
    std::string why;
    const fs::path bb = home / "rootfs" / "busybox", alp = home / "rootfs" / "alpine",
                   musl = home / "rootfs" / "musl";
    images_ =
        abx::testing::make_busybox_layer(bb, &why) && abx::testing::make_musl_layer(alp, &why) &&
        abx::testing::make_busybox_layer(alp, &why) && abx::testing::make_musl_layer(musl, &why);
    if (!images_) {
      images_skip_ = why;
      return;
    }
    std::ofstream(musl / "etc/passwd", std::ios::trunc)
        << "root:x:0:0:root:/root:/bin/hello\nuser:x:1000:1000:user:/home/user:/bin/hello\n";
    fs::create_directories(musl / "home/user");
    for (const auto& [name, dir] : std::initializer_list<std::pair<std::string, fs::path>>{
             {"busybox", bb}, {"alpine", alp}, {"musl", musl}}) {
      fs::create_directories(home / "templates" / name);
      std::ofstream(home / "templates" / name / "template.yaml")
          << "id: " << name << "\nrootfs: " << dir.string() << "\n";
    }
  }
  bool images_ = false;
  std::string images_skip_;
  std::vector<std::string> abxd_args() const override { return {"--server-ready-timeout", "2"}; }
  void SetUp() override {
    AbxdFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    user_home_ = tmp() / "user";
    fs::create_directories(user_home_);
  }
  std::vector<std::string> env() {
    return {"HOME=" + user_home_.string(), "ABX_API_URL=" + abxd().url(), "ABX_API_KEY=" + key(),
            "ABX_HOME=" + (user_home_ / ".abx").string()};
  }
  Out abx(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), ABX_CLI_BIN);
    return run_process(args, env(), input);
  }
  // abx with only `env` (no key, no home unless given).
  Out abx_with(std::vector<std::string> env, std::vector<std::string> args) {
    args.insert(args.begin(), ABX_CLI_BIN);
    env.push_back("HOME=" + user_home_.string());
    return run_process(args, env, "");
  }
  std::string create(const std::string& tpl = "base") {
    auto r = abx({"sandbox", "create", tpl, "--timeout", "5m"});
    EXPECT_EQ(r.code, 0) << r.err;
    std::string id = r.out.substr(0, r.out.find('\n'));
    EXPECT_EQ(id.size(), 20u) << r.out;
    return id;
  }
  fs::path user_home_;
};

TEST_F(CliE2E, ExecStreamsStdinAndExitsWithTheCommandsCode) {
  std::string id = create();
  auto cat = abx({"exec", "-i", id, "--", "cat"}, "hello\n");
  EXPECT_EQ(cat.code, 0) << cat.err;
  EXPECT_EQ(cat.out, "hello\n");
  // A larger input than one read, and EOF reaching the process (wc ends only then).
  std::string big(200'000, 'x');
  auto wc = abx({"exec", "-i", id, "--", "wc", "-c"}, big);
  EXPECT_EQ(wc.code, 0) << wc.err;
  EXPECT_EQ(wc.out, "200000\n");
  // Without -i the process's stdin is closed at once.
  auto no_in = abx({"exec", id, "--", "cat"}, "ignored\n");
  EXPECT_EQ(no_in.code, 0);
  EXPECT_EQ(no_in.out, "");
  EXPECT_EQ(abx({"exec", id, "--", "sh", "-c", "exit 7"}).code, 7);
  // abx's own failures are 125, whatever the command would have done.
  EXPECT_EQ(abx({"exec", "nosuchsandbox0000000", "--", "true"}).code, 125);
}

TEST_F(CliE2E, ExecEnvCwdAndUserNeverSwallowTheCommand) {
  std::string id = create();
  auto e = abx({"exec", id, "--env", "A=1", "--env", "B=two words", "--cwd", "/tmp", "--", "sh",
                "-c", "echo $A-$B-$(pwd)"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out, "1-two words-/tmp\n");
  auto u = abx({"exec", "--user", "root", id, "--", "id", "-u"});
  EXPECT_EQ(u.code, 0) << u.err;
  EXPECT_EQ(u.out, "0\n");
  // sandbox create: --env before the template name does not take the name as a second value.
  auto c = abx({"sandbox", "create", "--env", "X=1", "--env", "Y=2", "demo", "--json"});
  ASSERT_EQ(c.code, 0) << c.err;
  auto created = json::parse(c.out);
  EXPECT_EQ(created.at("templateID"), "demo");
  std::string id2(created.at("sandboxID").as_string());
  auto env = abx({"exec", id2, "--", "sh", "-c", "echo $X$Y"});
  EXPECT_EQ(env.out, "12\n") << env.err;
}

TEST_F(CliE2E, ExecRunsCommandLinesWithTheImagesShellWhereThereIsNoBash) {
  if (!images_) GTEST_SKIP() << images_skip_;
  std::string bb = create("busybox");
  auto line = abx({"exec", bb, "test -e /bin/bash || echo no bash; echo hi | tr a-z A-Z"});
  EXPECT_EQ(line.code, 0) << line.err;
  EXPECT_EQ(line.out, "no bash\nHI\n");
  EXPECT_EQ(abx({"exec", bb, "exit 7"}).code, 7);
  // Several words: the program itself, no shell (nothing expanded, spaces kept).
  auto argv = abx({"exec", bb, "--", "echo", "$HOME", "a  b"});
  EXPECT_EQ(argv.code, 0) << argv.err;
  EXPECT_EQ(argv.out, "$HOME a  b\n");

  std::string alp = create("alpine");  // musl's libc and loader, busybox's sh
  auto musl_line = abx({"exec", alp, "hello && echo $((1 + 2))"});
  EXPECT_EQ(musl_line.code, 0) << musl_line.err;
  EXPECT_EQ(musl_line.out, "hello from musl\n3\n");
}

TEST_F(CliE2E, ExecRunsProgramsInAnImageWithNoShellAndSaysWhyALineCannotRun) {
  if (!images_) GTEST_SKIP() << images_skip_;
  std::string id = create("musl");
  for (const char* prog : {"/bin/hello", "hello"}) {  // a path, or a name looked up on PATH
    auto r = abx({"exec", id, "--", prog});
    EXPECT_EQ(r.code, 0) << prog << ": " << r.err;
    EXPECT_EQ(r.out, "hello from musl\n");
  }
  auto line = abx({"exec", id, "hello; echo done"});
  EXPECT_EQ(line.code, 125);
  EXPECT_NE(line.err.find("this image has no shell (neither /bin/bash nor /bin/sh)"),
            std::string::npos)
      << line.err;
  EXPECT_NE(line.err.find("abx exec ID -- /path/to/prog args"), std::string::npos) << line.err;
}

// abx exec neither extends a sandbox's timeout (it used to make a 30 s sandbox live 5 minutes)
// nor resumes a paused one without saying so.
TEST_F(CliE2E, ExecKeepsTheSandboxsLifetimeAndSaysWhenItResumes) {
  auto c = abx({"sandbox", "create", "base", "--timeout", "30s"});
  ASSERT_EQ(c.code, 0) << c.err;
  std::string id = c.out.substr(0, c.out.find('\n'));
  auto end_at = [&] {
    auto i = abx({"sandbox", "info", id, "--json"});
    EXPECT_EQ(i.code, 0) << i.err;
    return std::string(json::parse(i.out).at("endAt").as_string());
  };
  const std::string before = end_at();
  auto e = abx({"exec", id, "--", "true"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err, "");
  EXPECT_EQ(end_at(), before);

  ASSERT_EQ(abx({"sandbox", "pause", id}).code, 0);
  auto r = abx({"exec", id, "--", "echo", "back"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "back\n");
  EXPECT_EQ(r.err, "abx: resuming " + id + "\n");
  EXPECT_EQ(abx({"sandbox", "kill", id}).code, 0);
}

TEST_F(CliE2E, ExecJsonPrintsOneStructuredDocument) {
  std::string id = create();
  auto r = abx({"--json", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.code, 3);
  auto v = json::parse(r.out);
  EXPECT_EQ(v, json::parse(R"({"exitCode":3,"stdout":"out\n","stderr":"err\n"})")) << r.out;
  EXPECT_EQ(r.err, "");
  // -t needs a terminal: refused (125) when stdin is a pipe.
  auto t = abx({"exec", "-t", id, "--", "true"});
  EXPECT_EQ(t.code, 125);
  EXPECT_NE(t.err.find("-t needs a terminal"), std::string::npos) << t.err;
}

// abx under a pseudo-terminal of 33 rows × 101 columns, as in a user's terminal emulator.
struct PtyRun {
  int code = -1;
  std::string screen;
  bool raw_restored = false;
};

PtyRun run_in_pty(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  const std::string& typed = "", const std::function<void(int master)>& mid = {}) {
  winsize ws{};
  ws.ws_row = 33;
  ws.ws_col = 101;
  int master = -1;
  pid_t pid = forkpty(&master, nullptr, nullptr, &ws);
  if (pid == 0) {
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  PtyRun r;
  termios before{};
  tcgetattr(master, &before);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool typed_done = typed.empty(), mid_done = !mid;
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 200) > 0) {
      char buf[4096];
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: the child side closed
      r.screen.append(buf, static_cast<std::size_t>(n));
    }
    // Once the remote shell printed its prompt marker, act.
    if (!mid_done && r.screen.find("READY") != std::string::npos) {
      mid(master);
      mid_done = true;
    }
    if (!typed_done && r.screen.find("READY") != std::string::npos) {
      [[maybe_unused]] auto n = write(master, typed.data(), typed.size());
      typed_done = true;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      break;
    }
  }
  int st = 0;
  waitpid(pid, &st, 0);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  close(master);
  return r;
}

TEST_F(CliE2E, ExecTtyGivesAPseudoTerminalOfOurSize) {
  std::string id = create();
  auto e = env();
  auto r =
      run_in_pty({ABX_CLI_BIN, "exec", "-t", id, "--", "sh", "-c", "tty; stty size; exit 5"}, e);
  EXPECT_EQ(r.code, 5) << r.screen;
  EXPECT_NE(r.screen.find("/dev/pts/"), std::string::npos) << r.screen;
  EXPECT_NE(r.screen.find("33 101"), std::string::npos) << r.screen;

  // -it: keystrokes reach the remote terminal (its line discipline echoes them), and a window
  // resize (SIGWINCH on our side) reaches it too.
  auto it = run_in_pty({ABX_CLI_BIN, "exec", "-it", id, "--", "sh", "-c",
                        "echo READY; read line; stty size; echo got:$line"},
                       e, "", [](int master) {
                         winsize ws{};
                         ws.ws_row = 40;
                         ws.ws_col = 120;
                         ioctl(master, TIOCSWINSZ,
                               &ws);  // the kernel sends SIGWINCH to abx's process group
                         std::this_thread::sleep_for(std::chrono::milliseconds(500));
                         const char typed[] = "typed words\r";
                         [[maybe_unused]] auto n = write(master, typed, sizeof typed - 1);
                       });
  EXPECT_EQ(it.code, 0) << it.screen;
  EXPECT_NE(it.screen.find("got:typed words"), std::string::npos) << it.screen;
  EXPECT_NE(it.screen.find("40 120"), std::string::npos) << it.screen;
}

// The terminal is put back as it was, also when the command fails.
TEST_F(CliE2E, ExecTtyRestoresTheLocalTerminal) {
  std::string id = create();
  auto e = env();
  // The child of forkpty checks its own terminal's mode after abx returns.
  std::string script = std::string(ABX_CLI_BIN) + " exec -t " + id +
                       " -- sh -c 'exit 9'; echo rc=$?; stty -a | grep -o -- '-\\?icanon'";
  auto r = run_in_pty({"/bin/sh", "-c", script}, e);
  EXPECT_NE(r.screen.find("rc=9"), std::string::npos) << r.screen;
  EXPECT_NE(r.screen.find("icanon"), std::string::npos) << r.screen;
  EXPECT_EQ(r.screen.find("-icanon"), std::string::npos) << r.screen;  // canonical mode again
}

std::string mode_of(const fs::path& p) {
  struct stat st {};
  if (lstat(p.c_str(), &st) != 0) return "missing";
  char buf[8];
  std::snprintf(buf, sizeof buf, "%o", st.st_mode & 07777);
  return buf;
}

TEST_F(CliE2E, FilesCpCopiesDirectoryTreesBothWaysWithTheirModes) {
  std::string id = create();
  fs::path src = tmp() / "tree";
  fs::create_directories(src / "a" / "b");
  fs::create_directories(src / "empty");
  std::ofstream(src / "a" / "b" / "deep.txt") << "deep\n";
  std::ofstream(src / "run.sh") << "#!/bin/sh\necho ran\n";
  std::string blob(300'000, '\0');
  for (std::size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 7);
  std::ofstream(src / "a" / "blob.bin", std::ios::binary) << blob;
  fs::permissions(src / "run.sh", static_cast<fs::perms>(0750));
  fs::permissions(src / "a" / "b" / "deep.txt", static_cast<fs::perms>(0600));
  fs::permissions(src / "a", static_cast<fs::perms>(0700));

  auto up = abx({"files", "cp", src.string(), id + ":/tmp/dst"});
  ASSERT_EQ(up.code, 0) << up.err;
  EXPECT_NE(up.out.find("copied 3 files"), std::string::npos) << up.out;
  auto listing = abx({"exec", id, "--", "sh", "-c",
                      "cd /tmp/dst && find . | sort | xargs stat -c '%a %n' && ./run.sh"});
  EXPECT_EQ(listing.out,
            "755 .\n700 ./a\n755 ./a/b\n600 ./a/b/deep.txt\n644 ./a/blob.bin\n755 ./empty\n"
            "750 ./run.sh\nran\n")
      << listing.err;

  // Into an existing directory: under the source's name, as cp -r does.
  auto into = abx({"files", "cp", src.string(), id + ":/tmp/dst", "--json"});
  ASSERT_EQ(into.code, 0) << into.err;
  EXPECT_EQ(json::parse(into.out).at("destination").as_string(), id + ":/tmp/dst/tree");

  fs::path back = tmp() / "back";
  auto down = abx({"files", "cp", id + ":/tmp/dst", back.string()});
  ASSERT_EQ(down.code, 0) << down.err;
  std::ifstream deep(back / "a" / "b" / "deep.txt");
  std::string line;
  std::getline(deep, line);
  EXPECT_EQ(line, "deep");
  std::ifstream bin(back / "a" / "blob.bin", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(bin), {}), blob);
  EXPECT_EQ(mode_of(back / "run.sh"), "750");
  EXPECT_EQ(mode_of(back / "a"), "700");
  EXPECT_EQ(mode_of(back / "a" / "b" / "deep.txt"), "600");
  EXPECT_TRUE(fs::is_directory(back / "empty"));
  EXPECT_TRUE(fs::is_directory(back / "tree" / "a" / "b"));  // the second copy came back too

  // A single file works the same way.
  auto one = abx({"files", "cp", id + ":/tmp/dst/run.sh", (tmp() / "one.sh").string()});
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(mode_of(tmp() / "one.sh"), "750");
}

TEST_F(CliE2E, FilesLsDepthNamesEntriesWithTheirDirectories) {
  std::string id = create();
  ASSERT_EQ(abx({"exec", id, "mkdir -p /tmp/t/a/b && touch /tmp/t/a/f /tmp/t/g"}).code, 0);
  auto names = [&](const std::string& depth) {
    auto r = abx({"files", "ls", id, "/tmp/t", "--depth", depth});
    EXPECT_EQ(r.code, 0) << r.err;
    std::vector<std::string> out;  // the last column of each row after the header
    std::istringstream in(r.out);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) out.push_back(line.substr(line.rfind(' ') + 1));
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(names("1"), (std::vector<std::string>{"a", "g"}));
  EXPECT_EQ(names("2"), (std::vector<std::string>{"a", "a/b", "a/f", "g"}));
}

// IPython colours its tracebacks; into a pipe or a file abx code writes them without ANSI
// escapes (here stderr is a pipe).
TEST_F(CliE2E, CodeTracebacksHaveNoColoursWhenNotOnATerminal) {
  std::string id = create("code-interpreter");
  auto r = abx({"code", id, "def f():\n    return 1 / 0\nf()"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("ZeroDivisionError"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  // --json keeps the traceback as the interpreter gave it (E2B's SDKs get it coloured too).
  auto j = abx({"--json", "code", id, "1 / 0"});
  EXPECT_EQ(j.code, 1) << j.err;
  EXPECT_NE(j.out.find("ZeroDivisionError"), std::string::npos) << j.out;
}

TEST_F(CliE2E, FilesCpErrorsSayWhatIsWrong) {
  std::string id = create();
  auto missing = abx({"files", "cp", (tmp() / "nope").string(), id + ":/tmp/x"});
  EXPECT_EQ(missing.code, 4);
  EXPECT_NE(missing.err.find("no such file or directory"), std::string::npos) << missing.err;
  auto remote_missing = abx({"files", "cp", id + ":/no/such/dir", (tmp() / "x").string()});
  EXPECT_EQ(remote_missing.code, 4);
  EXPECT_NE(remote_missing.err.find(id + ":/no/such/dir"), std::string::npos) << remote_missing.err;
  auto both_local = abx({"files", "cp", "./a", "./b"});
  EXPECT_EQ(both_local.code, 2);
  EXPECT_NE(both_local.err.find("exactly one of SOURCE and DEST must be ID:PATH"),
            std::string::npos)
      << both_local.err;
  // A directory onto a file in the sandbox.
  ASSERT_EQ(abx({"exec", id, "--", "touch", "/tmp/afile"}).code, 0);
  fs::create_directories(tmp() / "d");
  auto onto_file = abx({"files", "cp", (tmp() / "d").string(), id + ":/tmp/afile"});
  EXPECT_NE(onto_file.code, 0);
  EXPECT_NE(onto_file.err.find("/tmp/afile"), std::string::npos) << onto_file.err;
}

// First run: abxd wrote a key into its home; abx, pointed at that home (ABX_HOME, or ~/.abx
// for both), finds it without being told, as long as the platform is on this host.
TEST_F(CliE2E, FirstRunFindsTheKeyAbxdWroteAndAuthErrorsNameTheFix) {
  std::string url = "ABX_API_URL=" + abxd().url();
  auto found = abx_with({url, "ABX_HOME=" + home().string()}, {"sandbox", "list"});
  EXPECT_EQ(found.code, 0) << found.err;
  auto flag = abx_with({url}, {"--home", home().string(), "sandbox", "list", "--json"});
  EXPECT_EQ(flag.code, 0) << flag.err;
  // The same home through "localhost" (not only 127.0.0.1) counts as this host.
  auto local = abx_with(
      {"ABX_API_URL=http://localhost:" + std::to_string(port()), "ABX_HOME=" + home().string()},
      {"sandbox", "list"});
  EXPECT_EQ(local.code, 0) << local.err;

  // No key anywhere: exit 3, and the message says what to do and where the key would be.
  fs::path empty_home = tmp() / "empty-home";
  auto none = abx_with({url, "ABX_HOME=" + empty_home.string()}, {"sandbox", "list"});
  EXPECT_EQ(none.code, 3);
  for (const std::string& needle :
       {std::string("set ABX_API_KEY or pass --api-key"), (empty_home / "api_key").string()})
    EXPECT_NE(none.err.find(needle), std::string::npos) << none.err;
  // A wrong key: named by where it came from, with the file abxd wrote.
  auto wrong = abx_with({url, "ABX_API_KEY=e2b_0123", "ABX_HOME=" + home().string()},
                        {"--json", "sandbox", "list"});
  EXPECT_EQ(wrong.code, 3);
  auto j = json::parse(wrong.out);
  std::string msg(j.at("error").as_string());
  EXPECT_NE(msg.find("the API key from ABX_API_KEY was refused"), std::string::npos) << msg;
  EXPECT_NE(msg.find("abxd wrote one to " + (home() / "api_key").string()), std::string::npos)
      << msg;
  // A key file of another home is refused with a question about the home.
  fs::create_directories(tmp() / "other-home");
  std::ofstream(tmp() / "other-home" / "api_key") << "e2b_00000000\n";
  auto other = abx_with({url, "ABX_HOME=" + (tmp() / "other-home").string()}, {"sandbox", "list"});
  EXPECT_EQ(other.code, 3);
  EXPECT_NE(other.err.find("serving another home"), std::string::npos) << other.err;
}

// eval "$(abx env)" gives the e2b SDKs what they need for this abxd: its URL for both planes and
// the key abxd wrote into its home (found as the CLI finds it: no key given).
TEST_F(CliE2E, EnvPrintsExportLinesForTheE2bSdks) {
  auto env = abx_with({"ABX_API_URL=" + abxd().url(), "ABX_HOME=" + home().string()}, {"env"});
  ASSERT_EQ(env.code, 0) << env.err;
  auto sh = run_process({"/bin/sh", "-c",
                         "eval \"$ABX_ENV_OUT\"; printf '%s|%s|%s|%s|%s\\n' \"$E2B_API_URL\" "
                         "\"$E2B_SANDBOX_URL\" \"$E2B_VOLUME_API_URL\" \"$E2B_API_KEY\" "
                         "\"${E2B_DOMAIN-unset}\""},
                        {"ABX_ENV_OUT=" + env.out}, "");
  ASSERT_EQ(sh.code, 0) << sh.err;
  EXPECT_EQ(sh.out,
            abxd().url() + "|" + abxd().url() + "|" + abxd().url() + "|" + key() + "|unset\n")
      << env.out;
  // No abxd has written a key into this home: the error says how to get one.
  auto none =
      abx_with({"ABX_API_URL=" + abxd().url(), "ABX_HOME=" + (tmp() / "empty").string()}, {"env"});
  EXPECT_EQ(none.code, 3);
  EXPECT_EQ(none.out, "");
  EXPECT_NE(none.err.find("start abxd first (`abx up`"), std::string::npos) << none.err;
}

TEST_F(CliE2E, TokenCreateRefusesCommandsTheSandboxDoesNotServe) {
  std::string id = create("demo");
  Out ok;
  for (int i = 0; i < 100; ++i) {  // until the command server is up
    ok = abx({"token", "create", id, "--command", "demo", "--command", "add"});
    if (ok.code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out.rfind("abxs1.", 0), 0u) << ok.out;
  auto bad = abx({"token", "create", id, "--command", "demo", "--command", "nosuch"});
  EXPECT_EQ(bad.code, 4);
  EXPECT_EQ(bad.out, "");  // no token
  EXPECT_NE(bad.err.find("serves no command 'nosuch'"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("add, "), std::string::npos) << bad.err;  // the known ones, listed
  EXPECT_NE(bad.err.find("demo"), std::string::npos) << bad.err;
  // A sandbox without a command server: the check cannot be made; --no-check mints anyway.
  std::string plain = create("base");
  auto unchecked = abx({"token", "create", plain, "--command", "x"});
  EXPECT_NE(unchecked.code, 0);
  EXPECT_NE(unchecked.err.find("--no-check"), std::string::npos) << unchecked.err;
  EXPECT_EQ(abx({"token", "create", plain, "--command", "x", "--no-check"}).code, 0);
}

// `abx logs --json` lines (NDJSON) as objects.
std::vector<json::object> ndjson(const std::string& out) {
  std::vector<json::object> v;
  std::size_t pos = 0;
  for (std::size_t nl; (nl = out.find('\n', pos)) != std::string::npos; pos = nl + 1)
    v.push_back(json::parse(out.substr(pos, nl - pos)).as_object());
  return v;
}

bool has(const std::vector<json::object>& lines, const std::string& source,
         const std::string& stream, const std::string& message_part) {
  for (const auto& l : lines) {
    if (l.at("source") == source.c_str() && l.at("stream") == stream.c_str() &&
        std::string(l.at("message").as_string()).find(message_part) != std::string::npos)
      return true;
  }
  return false;
}

TEST_F(CliE2E, LogsShowTheStartCommandsOutputAndTheLifecycle) {
  std::string id = create("talk");
  std::vector<json::object> lines;
  for (int i = 0; i < 100; ++i) {
    auto r = abx({"--json", "logs", id});
    ASSERT_EQ(r.code, 0) << r.err;
    lines = ndjson(r.out);
    if (has(lines, "start command", "event", "exited with status 0")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(has(lines, "abxd", "event", "created from template 'talk'"));
  EXPECT_TRUE(has(lines, "start command", "event", "started start command"));
  EXPECT_TRUE(has(lines, "start command", "stdout", "hello from start"));
  EXPECT_TRUE(has(lines, "start command", "stderr", "oops"));
  EXPECT_TRUE(has(lines, "start command", "stdout", "tick 3"));
  EXPECT_TRUE(has(lines, "start command", "event", "exited with status 0"));
  for (std::size_t i = 1; i < lines.size(); ++i)  // oldest first
    EXPECT_LE(lines[i - 1].at("timestamp").as_string(), lines[i].at("timestamp").as_string());
  // --limit N: the first N lines, no more (it used to be only the size of each request). Which
  // lines those are depends on timing (abxd's "created" event and the start command's first
  // output race), so they are compared with the full listing's first three.
  ASSERT_GT(lines.size(), 3u);
  auto all = abx({"logs", id});
  ASSERT_EQ(all.code, 0) << all.err;
  auto limited = abx({"logs", id, "--limit", "3"});
  EXPECT_EQ(limited.code, 0) << limited.err;
  EXPECT_EQ(std::count(limited.out.begin(), limited.out.end(), '\n'), 3) << limited.out;
  std::size_t end = 0;
  for (int n = 0; n < 3; ++n) {
    end = all.out.find('\n', end);
    ASSERT_NE(end, std::string::npos) << all.out;
    ++end;
  }
  EXPECT_EQ(limited.out, all.out.substr(0, end)) << all.out;

  // The human form names the source; pause and resume are lifecycle events too.
  ASSERT_EQ(abx({"sandbox", "pause", id}).code, 0);
  auto paused = abx({"logs", id});
  EXPECT_NE(paused.out.find("[abxd] paused"), std::string::npos) << paused.out;
  // A paused sandbox is not woken to read its output: abxd says so instead.
  EXPECT_NE(paused.out.find("[abxd] the sandbox is paused"), std::string::npos) << paused.out;
  EXPECT_EQ(paused.out.find("oops"), std::string::npos) << paused.out;
  ASSERT_EQ(abx({"sandbox", "connect", id}).code, 0);  // resumes it
  auto resumed = abx({"logs", id});
  EXPECT_NE(resumed.out.find("[abxd] resumed"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("[start command stderr] oops"), std::string::npos) << resumed.out;
  ASSERT_EQ(abx({"sandbox", "timeout", id, "10m"}).code, 0);
  auto later = abx({"--json", "logs", id});
  EXPECT_TRUE(has(ndjson(later.out), "abxd", "event", "timeout set: ends in 600 s")) << later.out;

  // E2B's shape, straight from the API: logs[] and logEntries[] with RFC 3339 timestamps.
  auto req = http::make_request(boost::beast::http::verb::get,
                                "/sandboxes/" + id + "/logs?start=0&limit=3");
  req.set("X-API-KEY", key());
  auto e2b = http::fetch("127.0.0.1", port(), std::move(req));
  ASSERT_TRUE(e2b.ok());
  ASSERT_EQ(e2b->result_int(), 200u) << e2b->body();
  auto v = json::parse(e2b->body()).as_object();
  EXPECT_EQ(v.at("logs").as_array().size(), 3u) << e2b->body();
  ASSERT_EQ(v.at("logEntries").as_array().size(), 3u);
  const auto& first = v.at("logEntries").as_array()[0].as_object();
  EXPECT_TRUE(first.contains("level"));
  EXPECT_TRUE(first.contains("message"));
  EXPECT_TRUE(first.at("fields").as_object().contains("source"));
  EXPECT_EQ(v.at("logs").as_array()[0].at("timestamp").as_string().back(), 'Z');
  // E2B's line is one JSON object in a string, the same entry as logEntries[0].
  auto line = json::parse(v.at("logs").as_array()[0].at("line").as_string()).as_object();
  EXPECT_EQ(line.at("level"), first.at("level"));
  EXPECT_EQ(line.at("message"), first.at("message"));
  EXPECT_EQ(line.at("logger"), first.at("fields").at("source"));

  ASSERT_EQ(abx({"sandbox", "kill", id}).code, 0);
  EXPECT_EQ(abx({"logs", id}).code, 4);
}

// A command server that fails at start: its stderr and every restart are in `abx logs`.
// The base image's passwordless sudo works for its `user` (as in E2B's sandboxes), and gives
// the sandbox's root and no more: the same capabilities as root through the API, still under
// the seccomp filter, still inside the user namespace.
TEST_F(CliE2E, SudoInTheBaseImageGivesTheSandboxsRootOnly) {
  std::string id = create();
  const std::string probe =
      "id -u; grep -E '^(CapEff|CapBnd|Seccomp|NoNewPrivs):' /proc/self/status; "
      "cat /proc/self/uid_map";
  auto as_user = abx({"exec", id, "--", "sh", "-c", "id -un; id -u"});
  EXPECT_EQ(as_user.out, "user\n1000\n") << as_user.err;
  auto sudo = abx({"exec", id, "--", "sudo", "-n", "sh", "-c", probe});
  ASSERT_EQ(sudo.code, 0) << sudo.out << sudo.err;
  // The sandbox's hostname resolves (/etc/hosts from envd): sudo used to complain every time.
  EXPECT_EQ(sudo.err, "");
  auto root = abx({"exec", "--user", "root", id, "--", "sh", "-c", probe});
  ASSERT_EQ(root.code, 0) << root.err;
  EXPECT_EQ(sudo.out.substr(0, 2), "0\n") << sudo.out;
  EXPECT_EQ(sudo.out, root.out);  // capabilities, filter and id map: as the API's root
  EXPECT_NE(sudo.out.find("Seccomp:\t2"), std::string::npos) << sudo.out;
  EXPECT_EQ(sudo.out.find("4294967295"), std::string::npos) << sudo.out;  // not the host's map
}

// What E2B's base image has and its SDK's tests assume: python and python3, bash, git, curl.
TEST_F(CliE2E, BaseImageHasTheToolsE2bsBaseHas) {
  std::string id = create();
  auto r = abx({"exec", id, "--", "sh", "-c",
                "python -c 'import sys; print(sys.version_info[0])'; python3 -c 'print(2+2)'; "
                "bash -c 'echo $((6*7))'; git --version | cut -d' ' -f1-2; "
                "curl --version | head -c 4; echo"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "3\n4\n42\ngit version\ncurl\n") << r.err;
}

// A template whose command server cannot start: create fails with the server's own words and
// leaves no sandbox behind (issue 12: never a sandbox with a silently empty command list).
TEST_F(CliE2E, CreateFailsWithTheCommandServersOwnError) {
  auto r = abx({"sandbox", "create", "crash"});
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.err.find("template 'crash': its command server did not start"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("exited with status 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fatal: cannot bind port 49982"), std::string::npos) << r.err;
  auto list = abx({"sandbox", "list"});
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_EQ(list.out.find("crash"), std::string::npos) << list.out;
  // Nothing of it is left: its run directory (token, config) and its state directory (named by
  // its id; abxd's own files there are dot files).
  auto empty = [](const fs::path& dir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (!e.path().filename().string().starts_with(".")) return false;
    return true;
  };
  EXPECT_TRUE(empty(home() / "run"));
  EXPECT_TRUE(empty(home() / "sandboxes"));
}

// A server that runs but never listens on its declared port fails the create once
// --server-ready-timeout (2 s here) has passed, with what it printed.
TEST_F(CliE2E, CreateFailsWhenTheCommandServerNeverListens) {
  auto r = abx({"sandbox", "create", "deaf"});
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.err.find("did not accept connections on port 49982 within 2.00 s"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("listening somewhere else"), std::string::npos) << r.err;
}

TEST_F(CliE2E, LogsShowACrashingCommandServersErrorAndRestarts) {
  std::string id = create("flaky");
  std::vector<json::object> lines;
  auto count = [&](const std::string& part) {
    int n = 0;
    for (const auto& l : lines)
      n += std::string(l.at("message").as_string()).find(part) != std::string::npos;
    return n;
  };
  for (int i = 0; i < 100 && count("restarting command server in") < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    lines = ndjson(abx({"--json", "logs", id}).out);
  }
  EXPECT_TRUE(has(lines, "command server", "stderr", "fatal: cannot bind port 49982"));
  EXPECT_TRUE(has(lines, "command server", "event", "command server exited with status 3"));
  EXPECT_TRUE(has(lines, "command server", "event", "restarting command server in 100 ms"));
  EXPECT_TRUE(has(lines, "command server", "event", "restarting command server in 200 ms"));
  EXPECT_GE(count("fatal: cannot bind"), 3);
}

// -f prints each line once as it comes and ends when the sandbox goes away.
TEST_F(CliE2E, LogsFollowPrintsNewLinesOnceUntilTheSandboxIsGone) {
  std::string id = create("talk");
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(4500));  // after tick 3
    abx({"sandbox", "kill", id});
  });
  auto f = abx({"logs", "-f", id});
  killer.join();
  EXPECT_EQ(f.code, 0) << f.err;
  for (const char* tick : {"tick 1", "tick 2", "tick 3", "] hello from start"}) {
    auto first = f.out.find(tick);
    EXPECT_NE(first, std::string::npos) << tick << "\n" << f.out;
    EXPECT_EQ(f.out.find(tick, first + 1), std::string::npos) << tick << " twice\n" << f.out;
  }
  EXPECT_NE(f.err.find("is gone"), std::string::npos) << f.err;
}

// abxd's own log, with its stderr (inherited from ours while it starts) in a file.
class AbxdLogE2E : public CliE2E {
 protected:
  void SetUp() override {
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    int saved = dup(2);
    dup2(fd, 2);
    close(fd);
    CliE2E::SetUp();
    dup2(saved, 2);
    close(saved);
  }
  std::string abxd_log() const {
    std::ifstream in(log_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  testing::TempDir log_dir_{"abxd-log"};
  std::string log_path_ = (log_dir_ / "abxd.log").string();
};

TEST_F(AbxdLogE2E, AbxdLogsEveryLifecycleEventWithTheSandboxId) {
  std::string id = create();
  ASSERT_EQ(abx({"sandbox", "pause", id}).code, 0);
  ASSERT_EQ(abx({"sandbox", "connect", id}).code, 0);  // resumes
  ASSERT_EQ(abx({"sandbox", "timeout", id, "1"}).code, 0);
  std::string prefix = "[sandboxes] [sandbox=" + id + "] ";
  std::string log;
  for (int i = 0; i < 100 && log.find(prefix + "killed") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    log = abxd_log();
  }
  for (const char* event : {"created from template 'base'", "paused", "resumed",
                            "timeout set: ends in 1 s", "timeout reached: killing", "killed"})
    EXPECT_NE(log.find(prefix + event), std::string::npos) << event << "\n" << log;
}

TEST(CliBinaries, EveryBinaryPrintsItsVersion) {
  for (const char* bin : {ABX_CLI_BIN, ABXD_BIN, ABX_SERVER_BIN, ABX_ENVD_BIN}) {
    auto r = run_process({bin, "--version"}, {}, "");
    EXPECT_EQ(r.code, 0) << bin;
    std::string name = fs::path(bin).filename().string();
    EXPECT_EQ(r.out.rfind(name + " 0.", 0), 0u) << bin << ": " << r.out;
  }
}

TEST(CliBinaries, AMistypedCommandGetsASuggestion) {
  auto r = run_process({ABX_CLI_BIN, "sandbx"}, {}, "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown command 'sandbx'; did you mean 'sandbox'?"), std::string::npos)
      << r.err;
  auto nested = run_process({ABX_CLI_BIN, "--api-url", "http://x", "sandbox", "craete"}, {}, "");
  EXPECT_EQ(nested.code, 2);
  EXPECT_NE(nested.err.find("unknown command 'craete'; did you mean 'create'?"), std::string::npos)
      << nested.err;
  auto far = run_process({ABX_CLI_BIN, "--json", "frobnicate"}, {}, "");
  EXPECT_EQ(far.code, 2);
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
  EXPECT_NE(far.err.find("abx commands: sandbox, exec"), std::string::npos) << far.err;
  EXPECT_EQ(json::parse(far.out).at("code"), "InvalidArgument");
}

// abxd pausing to disk with CRIU (docs/persistence.md): skipped where CRIU is not installed.
class CliPersistenceE2E : public CliE2E {
 protected:
  std::vector<std::string> abxd_args() const override {
    auto a = CliE2E::abxd_args();
    a.insert(a.end(), {"--pause", "disk"});
    return a;
  }
  void SetUp() override {
    if (!fs::exists("/usr/local/lib/abx/criu/criu")) GTEST_SKIP() << "CRIU is not installed";
    CliE2E::SetUp();
  }
};

TEST_F(CliPersistenceE2E, PauseResumeAndSnapshotsFromTheCli) {
  std::string id = create();
  ASSERT_FALSE(HasFailure());
  // What the sandbox wrote before the pause is there after the resume.
  ASSERT_EQ(abx({"exec", id, "--", "sh", "-c", "echo keep > /tmp/mark"}).code, 0);
  auto p = abx({"sandbox", "pause", id});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, "paused " + id + "\n");
  EXPECT_EQ(abx({"sandbox", "pause", id}).out, "already paused " + id + "\n");
  auto l = abx({"sandbox", "list", "--json"});
  ASSERT_EQ(l.code, 0) << l.err;
  auto listed = json::parse(l.out);
  ASSERT_TRUE(listed.is_array()) << l.out;
  bool listed_paused = false;
  for (const auto& s : listed.as_array()) {
    ASSERT_TRUE(s.is_object()) << l.out;
    if (s.as_object().at("sandboxID") == json::value(id))
      listed_paused = s.as_object().at("state") == "paused";
  }
  EXPECT_TRUE(listed_paused) << l.out;

  auto r = abx({"sandbox", "resume", id, "--timeout", "5m"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "resumed " + id + "\n");
  EXPECT_EQ(abx({"sandbox", "resume", id}).out, "already running " + id + "\n");
  auto mark = abx({"exec", id, "--", "cat", "/tmp/mark"});
  EXPECT_EQ(mark.out, "keep\n") << mark.err;

  auto sn = abx({"sandbox", "snapshot", id, "--name", "cli-e2e"});
  ASSERT_EQ(sn.code, 0) << sn.err;
  std::string snap = sn.out.substr(0, sn.out.find('\n'));
  EXPECT_EQ(snap.rfind("snapshot-", 0), 0u) << sn.out;
  auto ls = abx({"snapshot", "list", "--sandbox", id, "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  auto snaps = json::parse(ls.out).as_array();
  ASSERT_EQ(snaps.size(), 1u) << ls.out;
  EXPECT_EQ(snaps[0].at("snapshotID"), json::value(snap));
  EXPECT_EQ(snaps[0].at("sandboxID"), json::value(id));
  EXPECT_FALSE(snaps[0].at("names").as_array().empty()) << ls.out;
  auto table = abx({"snapshot", "list"});
  EXPECT_NE(table.out.find(snap), std::string::npos) << table.out;

  auto rm = abx({"snapshot", "rm", snap});
  EXPECT_EQ(rm.code, 0) << rm.err;
  EXPECT_EQ(rm.out, "removed snapshot " + snap + "\n");
  EXPECT_EQ(abx({"snapshot", "rm", snap}).code, 4);  // gone
  EXPECT_EQ(abx({"snapshot", "list", "--sandbox", id, "--json"}).out, "[]\n");
  EXPECT_EQ(abx({"sandbox", "kill", id}).code, 0);
}
}  // namespace
}  // namespace abx
