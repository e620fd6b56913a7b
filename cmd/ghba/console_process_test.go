package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ghba/ghba/rpc"
)

// Environment of the browser test.
const (
	// envRequireBrowser, when set (CI sets it), makes TestProcessConsole
	// fail instead of skipping when Chromium is not installed.
	envRequireBrowser = "GHBA_REQUIRE_BROWSER"
	// envTestArtifacts names the directory the browser test writes its
	// screenshots and pages to when it fails (default
	// $TMPDIR/ghba-console-artifacts).
	envTestArtifacts = "GHBA_TEST_ARTIFACTS"
	// consoleBrowserTimeout bounds one browser step.
	consoleBrowserTimeout = 30 * time.Second
	// consoleSampleInterval is the console's sample interval in the test.
	consoleSampleInterval = 200 * time.Millisecond
)

// chromiumPath returns Chromium's path, skipping the test (or failing it
// with GHBA_REQUIRE_BROWSER set) when it is not installed.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(envRequireBrowser) != "" {
		t.Fatalf("Chromium is not installed (apt-get install chromium) and %s is set", envRequireBrowser)
	}
	t.Skipf("Chromium is not installed (apt-get install chromium); set %s to make this a failure", envRequireBrowser)
	return ""
}

// consoleBrowser is a headless Chromium driven by chromedp, with a
// screenshot and the page's HTML saved when the test fails.
type consoleBrowser struct {
	t   *testing.T
	ctx context.Context
}

// newConsoleBrowser starts Chromium; it is stopped when the test ends,
// after a failed test's screenshot is saved.
func newConsoleBrowser(t *testing.T, exe string) *consoleBrowser {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &consoleBrowser{t: t, ctx: ctx}
	t.Cleanup(b.saveOnFailure) // runs before the browser is stopped
	// The first call starts the browser: no timeout on its context, which
	// would stop the browser with it (chromedp.Run).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	return b
}

// value runs one action that returns a value, bounded by
// consoleBrowserTimeout.
func value[T any](b *consoleBrowser, what string, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, consoleBrowserTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		return v, fmt.Errorf("browser: %s: %w", what, err)
	}
	return v, nil
}

// mustValue is value that fails the test on an error.
func mustValue[T any](b *consoleBrowser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	v, err := value(b, what, a)
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// must runs steps, bounded by consoleBrowserTimeout, and fails the test on
// an error.
func (b *consoleBrowser) must(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	mustValue(b, what, chromedp.Steps(steps...))
}

// saveOnFailure writes a screenshot and the HTML of the current page to
// the artifacts directory when the test failed.
func (b *consoleBrowser) saveOnFailure() {
	if !b.t.Failed() {
		return
	}
	dir := cmp.Or(os.Getenv(envTestArtifacts), filepath.Join(os.TempDir(), "ghba-console-artifacts"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Logf("artifacts: %v", err)
		return
	}
	stamp := regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(b.t.Name(), "_") + "-" + time.Now().Format("20060102-150405")
	loc, _ := value(b, "location", chromedp.Location())
	png, err := value(b, "screenshot", chromedp.FullScreenshot(100))
	html, _ := value(b, "page", chromedp.OuterHTML(chromedp.CSS("html")))
	if len(png) > 0 {
		_ = os.WriteFile(filepath.Join(dir, stamp+".png"), png, 0o644)
	}
	if html != "" {
		_ = os.WriteFile(filepath.Join(dir, stamp+".html"), []byte("<!-- "+loc+" -->\n"+html), 0o644)
	}
	b.t.Logf("browser artifacts of the failure (page %s, err %v) in %s (%s.png, %s.html)", loc, err, dir, stamp, stamp)
}

// location returns the page's URL.
func (b *consoleBrowser) location() string {
	b.t.Helper()
	return mustValue(b, "location", chromedp.Location())
}

// texts returns the text of every node matching the CSS selector sel
// (none: an empty slice, without waiting).
func (b *consoleBrowser) texts(sel string) []string {
	b.t.Helper()
	return mustValue(b, "read "+sel, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll(`+strconv.Quote(sel)+`)).map(e => e.textContent.trim())`))
}

// TestProcessConsole drives the web console of a 3-node cluster with ACLs
// on in headless Chromium: a page without a session redirects to the
// login form; a wrong password is refused on the form; the right one logs
// in; the search box shows what "ghba find QUERY" prints, stage by stage,
// and its results link into the browser; the browser lists a directory as
// "ghba ls" does, with breadcrumbs; the cluster page shows the members and
// shards and both charts get data points as samples are taken; logout
// ends the session.
func TestProcessConsole(t *testing.T) {
	exe := chromiumPath(t)
	start := time.Now()
	c := newProcCluster(t, 0)
	c.aclConfig = fmt.Sprintf("acl:\n  enabled: true\n  server_token: %q\nconsole:\n  sample_interval: %s\n  history: 1m\n",
		procACLServerToken, consoleSampleInterval)
	for range 3 {
		c.addNode()
	}
	n1 := c.nodes[0]
	c.start(n1)
	c.waitServing(n1)
	anon := c.shell("anonymous", "")
	rootToken := strings.TrimSpace(anon.expect(0, n1, "", "acl", "bootstrap"))
	c.token = rootToken
	c.waitReady(n1.id+" leads the group", n1)
	c.start(c.nodes[1])
	c.start(c.nodes[2])
	c.waitReady("3 nodes ready", c.nodes...)
	t.Logf("cluster with ACLs ready after %v", time.Since(start).Round(time.Millisecond))

	root := c.shell("root", rootToken)
	root.expect(0, n1, "alice-password\n", "user", "add", "alice", "--uid", "1000", "--gid", "1000", "--password-stdin")
	root.expect(0, n1, "", "mkdir", "-p", "/docs/old")
	for _, p := range []string{"/docs/report", "/docs/report.pdf", "/docs/reports", "/docs/old/report", "/docs/notes.txt"} {
		root.expect(0, c.nodes[1], "", "create", p)
	}
	alice := c.shell("alice", "")
	alice.expect(0, n1, "alice-password\n", "login", "--user", "alice", "--password-stdin")
	wantFind := strings.Split(strings.TrimSpace(alice.expect(0, n1, "", "find", "report", "--sort")), "\n")
	var ls []struct{ Name, Type string }
	if err := json.Unmarshal([]byte(alice.expect(0, n1, "", "--json", "ls", "/docs")), &ls); err != nil {
		t.Fatalf("ls --json /docs: %v", err)
	}
	var wantLs []string // as the browser shows them: directories with a slash
	for _, e := range ls {
		if e.Type == rpc.TypeDir {
			e.Name += "/"
		}
		wantLs = append(wantLs, e.Name)
	}

	b := newConsoleBrowser(t, exe)
	browserStart := time.Now()
	base := "http://127.0.0.1:" + strconv.Itoa(n1.http)

	// ---- no session: the login form ----
	b.must("open /", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#login")))
	if loc := b.location(); loc != base+"/login?next=%2F" {
		t.Errorf("/ without a session ends at %s, want the login page", loc)
	}
	b.must("open /browse?path=/docs", chromedp.Navigate(base+"/browse?path=/docs"), chromedp.WaitVisible(chromedp.CSS("#login")))

	// ---- a wrong password, then the right one ----
	b.must("wrong password",
		chromedp.SendKeys(chromedp.CSS("#user"), "alice"),
		chromedp.SendKeys(chromedp.CSS("#password"), "not-her-password"),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#error")))
	if e := b.texts("#error"); len(e) != 1 || !strings.Contains(e[0], "Wrong user name or password") {
		t.Errorf("wrong password: error %q", e)
	}
	if w := b.texts("#whoami"); len(w) != 0 {
		t.Fatalf("logged in with a wrong password as %q", w)
	}
	// The refused form keeps the user name, not the password.
	if v := mustValue(b, "user field", chromedp.Value(chromedp.CSS("#user"))); v != "alice" {
		t.Errorf("the refused form's user field holds %q", v)
	}
	b.must("right password",
		chromedp.SendKeys(chromedp.CSS("#password"), "alice-password"),
		chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#whoami")))
	if w := b.texts("#whoami"); len(w) != 1 || w[0] != "alice" {
		t.Errorf("logged in as %q, want alice", w)
	}
	// The login went back to the page asked for.
	if loc := b.location(); loc != base+"/browse?path=/docs" {
		t.Errorf("after the login: %s, want the page asked for", loc)
	}

	// ---- the file browser ----
	if got := b.texts("#entries tr.entry td:first-child"); !slices.Equal(got, wantLs) {
		t.Errorf("browser lists /docs as %q; ghba ls /docs prints %q", got, wantLs)
	}
	if got := b.texts("#crumbs a"); !slices.Equal(got, []string{"/", "docs"}) {
		t.Errorf("breadcrumbs %q", got)
	}
	b.must("open a subdirectory", chromedp.Click(chromedp.Search(`//table[@id="entries"]//a[text()="old/"]`)),
		chromedp.WaitVisible(chromedp.Search(`//nav[@id="crumbs"]/a[text()="old"]`)))
	if got := b.texts("#entries tr.entry td:first-child"); !slices.Equal(got, []string{"report"}) {
		t.Errorf("browser lists /docs/old as %q", got)
	}

	// ---- search: what ghba find prints, each result linked ----
	b.must("search",
		chromedp.Navigate(base+"/search"),
		chromedp.WaitVisible(chromedp.CSS("#q")),
		chromedp.SendKeys(chromedp.CSS("#q"), "report"),
		chromedp.Submit(chromedp.CSS("#q")),
		chromedp.WaitVisible(chromedp.CSS("#results")))
	got := mustValue(b, "read the results", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#results tr.result")).map(
		r => r.querySelector(".stage").textContent.trim() + "\t" + r.querySelector(".path").textContent.trim())`))
	if !slices.Equal(got, wantFind) {
		t.Errorf("console search for report:\n%s\nghba find report --sort:\n%s", strings.Join(got, "\n"), strings.Join(wantFind, "\n"))
	}
	if len(got) == 0 || !strings.HasPrefix(got[0], "exact\t") || !slices.Contains(got, "related\t/docs/report.pdf") {
		t.Errorf("search results %q: want the exact names first, then report.pdf as related", got)
	}
	b.must("follow a result", chromedp.Click(chromedp.Search(`//td[@class="path"]/a[text()="/docs/report.pdf"]`)),
		chromedp.WaitVisible(chromedp.CSS("#stat")))
	if got := b.texts("#crumbs a"); !slices.Equal(got, []string{"/", "docs", "report.pdf"}) {
		t.Errorf("a result's page has breadcrumbs %q", got)
	}

	// ---- the cluster page and its charts ----
	b.must("cluster page", chromedp.Navigate(base+"/?refresh=0"), chromedp.WaitVisible(chromedp.CSS("#members")))
	if ids := b.texts("#members tr td:first-child"); !slices.Equal(ids, []string{"node1", "node2", "node3"}) {
		t.Errorf("members %q", ids)
	}
	if sh := b.texts("#shards tr td:first-child"); len(sh) == 0 {
		t.Error("no shards on the cluster page")
	}
	// Each chart gets a point per sample: reload until both have a few.
	const chartWait = 200 * consoleSampleInterval
	deadline := time.Now().Add(chartWait)
	for {
		points := mustValue(b, "read the charts", chromedp.Evaluate[[]int](`Array.from(document.querySelectorAll("#charts svg.chart")).map(
			s => s.querySelectorAll("circle.pt").length && s.querySelector("polyline.series").getAttribute("points").trim().split(/\s+/).length)`))
		if len(points) == 2 && points[0] >= 5 && points[1] >= 5 {
			t.Logf("charts with %v points", points)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("charts still have %v points after %v", points, chartWait)
		}
		b.must("reload", chromedp.Sleep(consoleSampleInterval), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#charts")))
	}
	series := mustValue(b, "read the series", chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#charts polyline.series")).map(p => p.dataset.series)`))
	if !slices.Equal(series, []string{"RPC calls", "L1", "L2", "L3", "L4"}) {
		t.Errorf("chart series %q", series)
	}

	// ---- logout ----
	b.must("logout", chromedp.Click(chromedp.CSS("#logout button")), chromedp.WaitVisible(chromedp.CSS("#login")))
	if w := b.texts("#whoami"); len(w) != 0 {
		t.Errorf("still logged in as %q after the logout", w)
	}
	b.must("open / after the logout", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#login")))
	t.Logf("browser steps took %v; whole test %v", time.Since(browserStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
