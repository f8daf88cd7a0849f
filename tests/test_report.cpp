// anvil report: a metrics file written by two runs (a resume appending to the file) is read
// with the later lines winning; the summary's figures; the HTML rendered by headless
// Chromium (--dump-dom) holds every chart with each of its data points. Without Chromium
// the rendering test is skipped with the reason, or fails under CI=true.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>

#include "core/fs.h"
#include "report/report.h"
#include "testing.h"

namespace anvil {
namespace {

// 40 steps of a first run (eval every 10), then a resume from step 30 to 50 (eval at 40, 50)
// whose elapsed time restarts: 50 steps, 5 eval points, 20 + 10 seconds.
struct Fixture {
  std::string dir, file;
  Fixture() : dir(testing::temp_dir("report")), file(dir + "/metrics.jsonl") {
    std::ofstream out(file);
    auto line = [&](int step, double elapsed, bool resumed) {
      const double loss = 3.0 * std::exp(-step / 20.0) + 0.5 + (resumed ? 0.001 : 0.0);
      out << "{\"step\":" << step << ",\"loss\":" << loss << ",\"grad_norm\":" << 1.0 / step << ",\"lr\":"
          << 1e-5 * std::min(1.0, step / 5.0) << ",\"tokens_per_s\":" << (step <= 10 ? 1000 : 2000 + step)
          << ",\"mfu\":" << 0.4 << ",\"peak_mem_gib\":" << 30.5 << ",\"planned_mem_gib\":" << 32.25
          << ",\"elapsed_s\":" << elapsed;
      if (step % 10 == 0) out << ",\"eval_loss\":" << loss + 0.2;
      out << "}\n";
    };
    for (int s = 1; s <= 40; ++s) line(s, s * 0.5, false);
    for (int s = 31; s <= 50; ++s) line(s, (s - 30) * 0.5, true);
  }
};

TEST(Report, ReadsResumedFilesAndSummarizes) {
  const Fixture f;
  const Metrics m = read_metrics(f.file);
  ASSERT_EQ(m.rows.size(), 50u);
  EXPECT_EQ(m.runs, 2);
  EXPECT_DOUBLE_EQ(m.elapsed_s, 30.0);
  EXPECT_NEAR(*m.rows[34].loss, 3.0 * std::exp(-35 / 20.0) + 0.501, 1e-5);  // the resumed run's line wins
  const ReportSummary s = summarize(m);
  EXPECT_EQ(s.last_step, 50);
  EXPECT_NEAR(*s.final_loss, 3.0 * std::exp(-2.5) + 0.501, 1e-5);
  EXPECT_EQ(s.best_loss_step, 50);
  EXPECT_EQ(s.best_eval_step, 50);
  double tps = 0;
  for (int step = 11; step <= 50; ++step) tps += 2000 + step;
  EXPECT_NEAR(*s.mean_tokens_per_s, tps / 40, 1e-9);  // the first 10 steps are not timed
  EXPECT_NEAR(*s.mean_mfu, 0.4, 1e-12);
  const std::string t = summary_text(s);
  EXPECT_NE(t.find("steps       1 to 50 (50 logged)"), std::string::npos) << t;
  EXPECT_NE(t.find("time        0:00:30"), std::string::npos) << t;
  EXPECT_NE(t.find("MFU 40.0%"), std::string::npos) << t;

  auto r = testing::run_anvil({"report", f.file});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote " + f.dir + "/metrics.html"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval loss   final"), std::string::npos) << r.out;

  std::ofstream(f.dir + "/bad.jsonl") << "{\"step\":1,\"loss\":2}\n{\"loss\":2}\n";
  r = testing::run_anvil({"report", f.dir + "/bad.jsonl"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("bad.jsonl:2: expected a JSON object with an integer \"step\""), std::string::npos) << r.out;
}

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const auto r = testing::run_command(std::string("command -v ") + name);
    if (r.exit_code == 0 && !r.out.empty()) return r.out.substr(0, r.out.find('\n'));
  }
  return "";
}

TEST(Report, ChromiumRendersEveryChartWithItsPoints) {
  const std::string chromium = find_chromium();
  if (chromium.empty())
    ANVIL_SKIP_UNLESS_REQUIRED(testing::in_ci(), "chromium is not installed (CI=true needs it): apt-get install "
                                                 "chromium (tools/setup.sh does)");
  const Fixture f;
  const std::string html = f.dir + "/report.html";
  auto r = testing::run_anvil({"report", f.file, "--out", html});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string page = read_file(html);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("http"), std::string::npos) << "the page fetches nothing";

  const auto dom = testing::run_command("(timeout 120 '" + chromium + "' --headless --no-sandbox --disable-gpu " +
                                        "--user-data-dir='" + f.dir + "/profile' --dump-dom 'file://" + html +
                                        "' 2>/dev/null)");
  ASSERT_EQ(dom.exit_code, 0) << dom.out;
  ASSERT_NE(dom.out.find("Training report"), std::string::npos) << dom.out.substr(0, 2000);
  struct Want {
    const char* chart;
    const char* series;
    size_t points;
  };
  for (const Want& w : {Want{"chart-loss", "loss", 50}, Want{"chart-loss", "eval_loss", 5}, Want{"chart-lr", "lr", 50},
                        Want{"chart-grad-norm", "grad_norm", 50}, Want{"chart-tokens-per-s", "tokens_per_s", 50},
                        Want{"chart-mfu", "mfu", 50}, Want{"chart-memory", "peak_mem_gib", 50},
                        Want{"chart-memory", "planned_mem_gib", 50}}) {
    const size_t at = dom.out.find(std::string("id=\"") + w.chart + "\"");
    ASSERT_NE(at, std::string::npos) << w.chart;
    const std::string fig = dom.out.substr(at, dom.out.find("</figure>", at) - at);
    std::smatch g;
    const std::regex series(std::string("<g class=\"series\" data-series=\"") + w.series +
                            "\" data-count=\"(\\d+)\"><polyline[^>]* points=\"([^\"]*)\"");
    ASSERT_TRUE(std::regex_search(fig, g, series)) << w.chart << " " << w.series;
    EXPECT_EQ(std::stoul(g[1].str()), w.points) << w.series;
    const std::string pts = g[2].str();
    size_t n = 0;
    const std::regex pair("[-0-9.]+,[-0-9.]+");
    for (auto it = std::sregex_iterator(pts.begin(), pts.end(), pair);
         it != std::sregex_iterator(); ++it)
      ++n;
    EXPECT_EQ(n, w.points) << w.chart << " " << w.series << " polyline";
    // Each point also carries its value as a tooltip.
    const std::string label = std::string(w.series) == "loss" ? "train loss at step " : "";
    if (!label.empty()) {
      size_t tips = 0;
      for (size_t p = fig.find(label); p != std::string::npos; p = fig.find(label, p + 1)) ++tips;
      EXPECT_EQ(tips, w.points);
    }
  }
  EXPECT_NE(dom.out.find("train loss at step 50: 0.7473"), std::string::npos);
}

}  // namespace
}  // namespace anvil
