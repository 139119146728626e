package testproc

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A process that prints and then waits is stopped by the test's cleanup,
// and its output is in the log.
func TestStartStop(t *testing.T) {
	var p *Process
	t.Run("Run", func(t *testing.T) {
		cmd := exec.Command("sh", "-c", "echo started; exec sleep 60")
		p = Start(t, "sleeper", cmd, filepath.Join(t.TempDir(), "sleeper.log"), 10*time.Second)
		deadline := time.Now().Add(10 * time.Second)
		for !p.LogContains("started") {
			if time.Now().After(deadline) {
				t.Fatalf("no output within 10s%s", p.LogTail(5))
			}
			select {
			case <-p.Done():
				t.Fatalf("exited: %v%s", p.Err(), p.LogTail(5))
			case <-time.After(10 * time.Millisecond):
			}
		}
		if tail := p.LogTail(5); !strings.HasSuffix(tail, "sleeper.log):\nstarted") {
			t.Errorf("LogTail = %q", tail)
		}
	})
	select {
	case <-p.Done():
	default:
		t.Fatal("the process outlived its test")
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Errorf("exit: %v, want terminated by SIGTERM", err)
	}
}

func TestHTTPReady(t *testing.T) {
	status := http.StatusServiceUnavailable
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer s.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if ok, err := HTTPReady(t.Context(), client, s.URL); ok || err == nil {
		t.Errorf("503: ready %v, err %v", ok, err)
	}
	status = http.StatusOK
	if ok, err := HTTPReady(t.Context(), client, s.URL); !ok || err != nil {
		t.Errorf("200: ready %v, err %v", ok, err)
	}
}
