package syncproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// maxFuzzMessages bounds the messages one input feeds a session, so that
// an input's run stays short whatever its size.
const maxFuzzMessages = 64

// encodeHubMessages is the input format of FuzzSpokeHubMessages: each
// message's encoding, prefixed by its length as a varint.
func encodeHubMessages(msgs ...*federationpb.HubMessage) []byte {
	var b []byte
	for _, m := range msgs {
		enc, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		b = protowire.AppendBytes(b, enc)
	}
	return b
}

// decodeHubMessages reverses encodeHubMessages. It skips the records that
// are not a HubMessage, as a stream would never deliver them, and stops
// at a broken length.
func decodeHubMessages(data []byte) []*federationpb.HubMessage {
	var msgs []*federationpb.HubMessage
	for len(data) > 0 && len(msgs) < maxFuzzMessages {
		rec, n := protowire.ConsumeBytes(data)
		if n < 0 {
			break
		}
		data = data[n:]
		m := &federationpb.HubMessage{}
		if proto.Unmarshal(rec, m) == nil {
			msgs = append(msgs, m)
		}
	}
	return msgs
}

func welcomeMsg(w *federationpb.Welcome) *federationpb.HubMessage {
	return &federationpb.HubMessage{Kind: &federationpb.HubMessage_Welcome{Welcome: w}}
}

func importsMsg(im *federationpb.Imports) *federationpb.HubMessage {
	return &federationpb.HubMessage{Kind: &federationpb.HubMessage_Imports{Imports: im}}
}

// fuzzImports is an ImportsLink that keeps the sets it is given.
type fuzzImports struct {
	mu      sync.Mutex
	sets    []*federationpb.Imports
	changed chan struct{}
}

func (f *fuzzImports) Start() {}
func (f *fuzzImports) Stop()  {}
func (f *fuzzImports) Received(im *federationpb.Imports) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, im)
}
func (f *fuzzImports) NextHeld(int) []*federationpb.ImportsHeld { return nil }
func (f *fuzzImports) HeldChanged() <-chan struct{}             { return f.changed }

func membersMsg(clusters ...string) *federationpb.HubMessage {
	return &federationpb.HubMessage{Kind: &federationpb.HubMessage_Members{Members: &federationpb.Members{Clusters: clusters}}}
}

// fuzzObserver counts what a session reports without ever blocking it:
// spokeEvents' channels would fill up with the answers a fuzzed hub sends.
type fuzzObserver struct {
	mu               sync.Mutex
	welcomed, nacked int
}

func (o *fuzzObserver) Welcomed(*federationpb.Welcome) { o.count(&o.welcomed) }
func (o *fuzzObserver) Sent(Update, int)               {}
func (o *fuzzObserver) Acked(uint64, bool)             {}
func (o *fuzzObserver) Nacked(*federationpb.Nack)      { o.count(&o.nacked) }

func (o *fuzzObserver) count(n *int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	*n++
}

// FuzzSpokeHubMessages plays a hub that sends a spoke's session whatever
// the input decodes to (see encodeHubMessages); see playHub for what the
// session must do.
func FuzzSpokeHubMessages(f *testing.F) {
	for _, seed := range [][]*federationpb.HubMessage{
		{welcomeMsg(&federationpb.Welcome{}), ack(1), ack(2), ack(3)},
		{
			welcomeMsg(&federationpb.Welcome{Resume: true, Version: 5, HubId: "hub-a", Limits: &federationpb.Limits{MaxMessageBytes: 1}}),
			membersMsg("east", "west"), nack(1, federationpb.NackCode_NACK_CODE_INVALID), ack(1),
		},
		{welcomeMsg(&federationpb.Welcome{}), nack(1, federationpb.NackCode_NACK_CODE_NO_BASE), nack(2, federationpb.NackCode_NACK_CODE_NO_BASE), membersMsg()},
		{welcomeMsg(&federationpb.Welcome{}), welcomeMsg(&federationpb.Welcome{Resume: true}), membersMsg("a", "", "a"), ack(0), ack(1<<64 - 1)},
		{welcomeMsg(&federationpb.Welcome{}), {}, ack(7), nack(7, federationpb.NackCode(99))},
		{ack(1)},
		{membersMsg("east"), welcomeMsg(&federationpb.Welcome{})},
		{
			welcomeMsg(&federationpb.Welcome{}),
			importsMsg(&federationpb.Imports{Version: 1, Full: true, More: true, Imports: []*federationpb.Import{{Namespace: "demo", Name: "echo"}}}),
			importsMsg(&federationpb.Imports{Version: 1, Full: true, Imports: []*federationpb.Import{{Namespace: "demo", Name: "echo", Sources: []*federationpb.ImportSource{{Cluster: "west"}}}}}),
			importsMsg(&federationpb.Imports{Version: 2, Removed: []string{"demo/echo"}}), ack(1),
		},
		{welcomeMsg(&federationpb.Welcome{}), importsMsg(&federationpb.Imports{Version: 1, More: true}), importsMsg(&federationpb.Imports{Version: 3})},
		{},
	} {
		f.Add(encodeHubMessages(seed...))
	}
	f.Fuzz(func(t *testing.T, data []byte) { playHub(t, data) })
}

// TestSpokeHubMessagesOverMaxMembers: a hub that announces more members
// than MaxMembers. The fuzzer does not start from this input: it would
// spend its time minimizing the large inputs it derives from it.
func TestSpokeHubMessagesOverMaxMembers(t *testing.T) {
	many := make([]string, MaxMembers+5)
	for i := range many {
		many[i] = fmt.Sprintf("c%d", i)
	}
	// The Members message is in the session's hands before the Ack is:
	// the session has taken it when it ends.
	if got := playHub(t, encodeHubMessages(welcomeMsg(&federationpb.Welcome{}), membersMsg(many...), ack(1))); !slices.Equal(got, many[:MaxMembers]) {
		t.Errorf("the spoke keeps %d members, want the first %d announced", len(got), MaxMembers)
	}
}

// playHub plays a hub that sends a spoke's session the messages data
// decodes to, then closes the stream. Whatever the hub sends, the session
// must not panic or hang, must keep at most MaxMembers members, and must
// end because the stream did, or, when the first message is not a
// Welcome, with ErrNoWelcome. It returns the members the spoke keeps.
func playHub(t *testing.T, data []byte) []string {
	t.Helper()
	msgs := decodeHubMessages(data)
	// Within the deadline a session has long ended: past it, it hangs.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// The clock never moves: the session ends because of the hub's
	// messages and the stream, never because of a timer.
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	shard := newFakeShard(clk)
	shard.push(1, true, []string{"10.0.0.1"}, []string{"10.0.0.2"})
	shard.push(2, false, []string{"10.0.0.3"})
	shard.push(3, false, []string{"10.0.0.4"})
	obs := &fuzzObserver{}
	imports := &fuzzImports{changed: make(chan struct{})}
	cfg := SpokeConfig{
		ClusterID: "east", Build: "fuzz", MaxMessageBytes: 1 << 20,
		WelcomeTimeout: time.Minute, AckTimeout: time.Minute,
		NackBackoff: time.Second, MaxNackBackoff: 30 * time.Second, Clock: clk,
		Imports: imports,
	}
	spoke := NewSpoke(cfg, shard, obs)
	// Unbuffered: each message the hub sends is in the session's hands
	// when Send returns, so that they arrive in order before the end.
	dial := newDialer(0)
	var (
		welcomed bool
		err      error
	)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		welcomed, err = spoke.Session(ctx, dial.dial)
	}()
	// A test that fails early leaves no session behind.
	defer func() {
		cancel()
		<-ended
	}()

	var h hubEnd
	select {
	case h = <-dial.hubs:
	case <-ctx.Done():
		t.Fatal("the session did not dial")
	}
	// A hub answers once it has the Hello; after it, the spoke's
	// updates are read as they come, so that its Sends never wait on
	// the test.
	if _, rerr := h.Recv(); rerr != nil {
		t.Fatalf("no hello: %v", rerr)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			if _, err := h.Recv(); err != nil {
				return
			}
		}
	}()
	sent := 0
	for _, m := range msgs {
		if h.Send(m) != nil {
			break // the session ended: the stream with it
		}
		sent++
	}
	h.close()

	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatalf("the session hung after %d of %d messages", sent, len(msgs))
	}
	<-drained

	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("the session hung: it ended with %v", err)
	}
	firstWelcome := len(msgs) > 0 && msgs[0].GetWelcome() != nil
	switch {
	case welcomed != firstWelcome:
		t.Fatalf("welcomed %v after %d messages, the first a Welcome: %v", welcomed, len(msgs), firstWelcome)
	case len(msgs) > 0 && !firstWelcome:
		if !errors.Is(err, ErrNoWelcome) {
			t.Fatalf("the first message is %T, and the session ended with %v, want ErrNoWelcome", msgs[0].GetKind(), err)
		}
	case errors.Is(err, ErrBadImports):
		// Chunks of one imports set interleaved with another's: the
		// session resets the stream.
		if !slices.ContainsFunc(msgs, func(m *federationpb.HubMessage) bool { return m.GetImports() != nil }) {
			t.Fatalf("the session ended with %v and no Imports was sent", err)
		}
	case !errors.Is(err, io.EOF):
		// The hub only closes the stream: a session that ends for another
		// reason took an answer for a failure it is not.
		t.Fatalf("the session ended with %v, want the stream's end", err)
	}

	got := spoke.Members()
	if len(got) > MaxMembers {
		t.Fatalf("the spoke keeps %d members, more than %d", len(got), MaxMembers)
	}
	// The members are those of a Members message the session took, cut
	// to MaxMembers, or none.
	ok := len(got) == 0
	for _, m := range msgs[:sent] {
		if c := m.GetMembers().GetClusters(); m.GetMembers() != nil && slices.Equal(got, c[:min(len(c), MaxMembers)]) {
			ok = true
		}
	}
	if !ok {
		t.Fatalf("the spoke keeps members %v, which no Members message announced", got)
	}

	// The link is handed whole sets only: never one whose last chunk is
	// still to come.
	imports.mu.Lock()
	for _, set := range imports.sets {
		if set.GetMore() {
			t.Fatalf("the link was handed set %d before its last chunk", set.GetVersion())
		}
	}
	imports.mu.Unlock()

	obs.mu.Lock()
	defer obs.mu.Unlock()
	// Each update is in flight once, and only the update in flight can
	// be rejected.
	if obs.welcomed > 1 || obs.nacked > 3 {
		t.Fatalf("%d welcomes and %d nacks reported for one session of 3 updates", obs.welcomed, obs.nacked)
	}
	return got
}
