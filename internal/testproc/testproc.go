package testproc

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Process is a started helper process.
type Process struct {
	// LogPath is the file that holds the process's stdout and stderr.
	LogPath string
	// Pid is the process's ID (for its /proc entries: RSS, CPU time).
	Pid int

	name    string
	done    chan struct{} // closed when the process has exited
	waitErr error         // the process's exit, set before done is closed
}

// Start starts cmd as name (for messages) with its output in logPath, and
// stops it in t.Cleanup: SIGTERM, then a kill and a test error when it has
// not exited within stopTimeout. It fails the test when cmd cannot start.
func Start(t testing.TB, name string, cmd *exec.Cmd, logPath string, stopTimeout time.Duration) *Process {
	t.Helper()
	p := &Process{LogPath: logPath, name: name, done: make(chan struct{})}
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("%s: start %s: %v", name, cmd.Path, err)
	}
	p.Pid = cmd.Process.Pid
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(stopTimeout)
		defer timer.Stop()
		select {
		case <-p.done:
		case <-timer.C:
			_ = cmd.Process.Kill()
			<-p.done
			t.Errorf("%s did not exit within %v of SIGTERM: killed%s", name, stopTimeout, p.LogTail(20))
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process exited, once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.waitErr
}

// LogContains reports whether the log holds s.
func (p *Process) LogContains(s string) bool {
	data, _ := os.ReadFile(p.LogPath)
	return bytes.Contains(data, []byte(s))
}

// LogTail returns the log's last n lines after a line that names the
// process and the file, to append to a failure's message; "" when the log
// is empty.
func (p *Process) LogTail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	lines = lines[max(0, len(lines)-n):]
	return fmt.Sprintf("\nlast lines of %s's output (%s):\n%s", p.name, p.LogPath, bytes.Join(lines, []byte("\n")))
}

// HTTPReady asks url once and reports whether it answered 200.
func HTTPReady(ctx context.Context, client *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return true, nil
}
