package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/meshfed/meshfed/e2e/demofleet"
)

// browser returns a headless Chromium context. Without a Chromium the test
// is skipped, unless MESHFED_REQUIRE_BROWSER is set (CI installs Debian's
// chromium and sets it): a browser test that never runs proves nothing.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		if os.Getenv("MESHFED_REQUIRE_BROWSER") != "" {
			t.Fatal("no Chromium found (install Debian's chromium, or set CHROMIUM to its path)")
		}
		t.Skip("no Chromium found: install Debian's chromium to run the web view's test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		// The machine's network may be closed: no background traffic, no QUIC.
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-quic", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx
}

// artifacts is where the test keeps its screenshots: MESHFED_TEST_ARTIFACTS
// when set, else the test's temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("MESHFED_TEST_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// TestWebView loads the hub's /ui against the demo's clusters in a real
// headless Chromium, changes a manifest, and sees the page follow.
func TestWebView(t *testing.T) {
	ctx := browser(t)
	f := demofleet.Start(t)
	dir := f.Manifests
	url := "http://" + f.Hub.DebugAddr().String() + "/ui"
	shots := artifacts(t)

	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`[data-network="network-west"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-service="demo/echo"]`)),
	); err != nil {
		t.Fatalf("load %s: %v", url, err)
	}
	networks := run(ctx, t, chromedp.Text(chromedp.CSS(`#networks`)))
	echo := run(ctx, t, chromedp.Text(chromedp.CSS(`[data-service="demo/echo"]`)))
	writeShot(t, shots, "ui-before.png", run(ctx, t, chromedp.FullScreenshot(100)))
	if !strings.Contains(networks, "east") || !strings.Contains(networks, "live") {
		t.Errorf("the clusters section says %q", networks)
	}
	// East's two echo pods are in two zones, one each.
	if !strings.Contains(echo, "east us-east1/us-east1-b/: 1/1") || !strings.Contains(echo, "west us-west1/us-west1-a/: 1/1") {
		t.Errorf("echo's endpoints say %q, want one ready of one in each zone", echo)
	}

	// One of east's echo pods turns not ready in its manifest.
	echoFile := filepath.Join(dir, "east", "echo.yaml")
	data, err := os.ReadFile(echoFile)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "  - addresses: [\"127.0.0.12\"]\n    conditions: {ready: true", "  - addresses: [\"127.0.0.12\"]\n    conditions: {ready: false", 1)
	if edited == string(data) {
		t.Fatal("the demo's east/echo.yaml no longer has the endpoint this test edits")
	}
	if err := os.WriteFile(echoFile, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	// The page follows on its own (server-sent events), without a reload.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('[data-service="demo/echo"]').textContent.includes("us-east1-b/: 0/1")`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		echo = run(ctx, t, chromedp.Text(chromedp.CSS(`[data-service="demo/echo"]`)))
		t.Fatalf("the page did not show east's pod not ready: %v (it says %q)", err, echo)
	}
	writeShot(t, shots, "ui-after.png", run(ctx, t, chromedp.FullScreenshot(100)))
}

// run runs one browser action and returns its value, failing the test on
// an error.
func run[T any](ctx context.Context, t *testing.T, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func writeShot(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
