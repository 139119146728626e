package syncproto

import (
	"slices"
	"sync"
	"testing"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// fakeMembers is a membership the test changes.
type fakeMembers struct {
	mu       sync.Mutex
	members  []federation.ClusterID
	changed  chan struct{}
	expected []federation.ClusterID
}

func newFakeMembers(m ...federation.ClusterID) *fakeMembers {
	return &fakeMembers{members: m, changed: make(chan struct{})}
}

func (f *fakeMembers) WatchMembers() ([]federation.ClusterID, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members), f.changed
}

func (f *fakeMembers) Expect(ids []federation.ClusterID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expected = append(f.expected, ids...)
	return len(ids)
}

func (f *fakeMembers) set(m ...federation.ClusterID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members = m
	close(f.changed)
	f.changed = make(chan struct{})
}

// TestHubMembers: the hub learns the members a Hello names, tells the
// spoke the membership after its Welcome and again when it changes, and
// not when a change leaves it as it was.
func TestHubMembers(t *testing.T) {
	conn := newFakeConn()
	members := newFakeMembers("east", "west")
	h := testHub(conn)
	h.cfg.Members = members
	s := serve(t, h, "")
	s.hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1", Members: []string{"east", "north"}})
	if got := s.spoke.expect(t).GetMembers().GetClusters(); !slices.Equal(got, []string{"east", "west"}) {
		t.Fatalf("members after welcome: %v", got)
	}
	members.mu.Lock()
	expected := slices.Clone(members.expected)
	members.mu.Unlock()
	if !slices.Equal(expected, []federation.ClusterID{"east", "north"}) {
		t.Errorf("hub expects %v, want the hello's members", expected)
	}
	members.set("east", "west") // no change
	members.set("east", "north", "west")
	if got := s.spoke.expect(t).GetMembers().GetClusters(); !slices.Equal(got, []string{"east", "north", "west"}) {
		t.Errorf("members after a change: %v", got)
	}
}

// TestHubMembersMessageShared: every stream sends the one Members message
// of a membership (at a thousand clusters, a copy per stream would be
// megabytes), and a new one once the membership changes.
func TestHubMembersMessageShared(t *testing.T) {
	members := newFakeMembers("east", "west")
	h := testHub(newFakeConn())
	h.cfg.Members = members
	a, _ := h.membersMessage()
	b, _ := h.membersMessage()
	if a != b {
		t.Fatal("two streams got two Members messages for one membership")
	}
	members.set("east", "west")
	if c, _ := h.membersMessage(); c != a {
		t.Error("an equal membership built a new message")
	}
	members.set("east", "north", "west")
	c, _ := h.membersMessage()
	if c == a || !slices.Equal(c.GetMembers().GetClusters(), []string{"east", "north", "west"}) {
		t.Errorf("after a change: %v", c.GetMembers().GetClusters())
	}
}
