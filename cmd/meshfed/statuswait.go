package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/registry"
)

// waitForClusters asks the hub every interval until every cluster it
// knows (but withdrawn ones no one asked for) and each of want is live
// and synced and the hub is ready, then prints its status. Until ctx
// ends: then it prints the last status it got and returns an error
// naming what is not ready. It says on stderr what it waits for, each
// time that changes.
func waitForClusters(ctx context.Context, connect connector, want []federation.ClusterID, interval, timeout time.Duration,
	print func(*hubStatus) error, stderr io.Writer,
) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var conn *hubConn
	defer func() {
		if conn != nil {
			conn.close()
		}
	}()
	var (
		last    *hubStatus
		waiting []string
		failed  error // the last attempt's error, when it failed
		cut     error // the error of an attempt the deadline cut short
		said    string
	)
	for {
		s, err := func() (*hubStatus, error) {
			if conn == nil {
				c, err := connect(ctx)
				if err != nil {
					return nil, err
				}
				conn = c
			}
			s, err := conn.status(ctx, true)
			if err != nil {
				// A port-forward to a pod that has gone stays broken:
				// open another next time.
				conn.close()
				conn = nil
			}
			return s, err
		}()
		switch {
		case err == nil:
			last, failed = s, nil
			if waiting = notReady(s, want, time.Now()); len(waiting) == 0 {
				return print(s)
			}
		case errors.As(err, new(*permanentError)):
			return err
		case ended(ctx):
			cut = err // says less than the attempts before it did
		default:
			failed = err
		}
		msg := strings.Join(waiting, ", ")
		if failed != nil {
			msg = failed.Error()
		}
		if msg != said {
			fmt.Fprintf(stderr, "waiting: %s\n", msg)
			said = msg
		}
		select {
		case <-ctx.Done():
			stopped := "interrupted"
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				stopped = fmt.Sprintf("timed out after %v", timeout)
			}
			if last != nil {
				if err := print(last); err != nil {
					return err
				}
			}
			if failed != nil {
				return fmt.Errorf("%s: %w", stopped, failed)
			}
			if last == nil && cut != nil { // not one attempt finished
				return fmt.Errorf("%s: %w", stopped, cut)
			}
			return fmt.Errorf("%s; not live and synced: %s", stopped, strings.Join(waiting, ", "))
		case <-tick.C:
		}
	}
}

// ended: ctx is done, or its deadline has passed and its timer has not
// fired yet. In that window, clients that check the deadline themselves
// (client-go's rate limiter) fail with errors of their own, which must
// not pass for the answer the attempt was after.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// notReady says what is not ready, each with why: the hub (when s has
// its readiness), every cluster the hub knows but withdrawn ones want
// does not name, and each of want the hub does not know. With neither
// clusters nor want, it waits for a first cluster.
func notReady(s *hubStatus, want []federation.ClusterID, now time.Time) []string {
	var out []string
	if s.readyChecked && !s.ready {
		out = append(out, "the hub ("+s.notReady+")")
	}
	known, counted := map[federation.ClusterID]bool{}, 0
	for _, c := range s.clusters.Clusters {
		known[c.ID] = true
		if c.State == clusterset.Withdrawn && !slices.Contains(want, c.ID) {
			continue // gone for good, as far as the hub knows
		}
		counted++
		if why := clusterNotReady(c, now); why != "" {
			out = append(out, fmt.Sprintf("%s (%s)", c.ID, why))
		}
	}
	for _, id := range want {
		if !known[id] {
			out = append(out, fmt.Sprintf("%s (not known to the hub)", id))
		}
	}
	if counted == 0 && len(want) == 0 {
		out = append(out, "a first cluster (the hub knows none)")
	}
	return out
}

// clusterNotReady says why a cluster is not live and synced (the hub has
// applied its full state, and its newest update was not rejected), or ""
// when it is.
func clusterNotReady(c registry.ClusterStatus, now time.Time) string {
	switch {
	case c.State == clusterset.Withdrawn:
		return "withdrawn " + age(c.StateSince, now, "")
	case c.Expected:
		return "a member the hub has not heard from since it started"
	case !c.Connected:
		return fmt.Sprintf("%s, its spoke disconnected %s", c.State, age(c.DisconnectedAt, now, "-"))
	case c.State != clusterset.Live:
		return c.State.String()
	case c.LastAck.IsZero():
		return "connected; its shard has not arrived yet"
	case c.LastNack.After(c.LastAck):
		return "its last update was rejected: " + c.LastNackReason
	}
	return ""
}
