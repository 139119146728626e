package syncproto

import (
	"errors"
	"fmt"

	"github.com/meshfed/meshfed/federation"
)

// Why a spoke's session ended.
var (
	// ErrWelcomeTimeout ends a session whose Hello the hub did not answer in
	// time.
	ErrWelcomeTimeout = errors.New("the hub did not answer hello in time")
	// ErrNoWelcome ends a session whose first message from the hub is not
	// Welcome.
	ErrNoWelcome = errors.New("the hub's first message is not welcome")
	// ErrAckTimeout ends a session whose update the hub did not take and
	// answer in time.
	ErrAckTimeout = errors.New("the hub did not answer an update in time")
	// ErrBadImports ends a session whose hub sent imports out of order.
	ErrBadImports = errors.New("the hub sent imports out of order")
)

// Why a hub's session ended.
var (
	// ErrBadHello ends a stream that does not open with a valid Hello.
	ErrBadHello = errors.New("bad hello")
	// ErrSuperseded ends a stream that a newer stream of the same cluster
	// replaced.
	ErrSuperseded = errors.New("superseded by a newer stream for the same cluster")
	// ErrReset ends a stream whose spoke broke the protocol (chunks out of
	// order): the spoke reconnects and resends.
	ErrReset = errors.New("stream reset")
	// ErrSpokeGone ends a session whose stream failed after the Welcome: the
	// spoke left or its connection broke.
	ErrSpokeGone = errors.New("spoke disconnected")
	// ErrProtocolVersion ends a stream whose spoke speaks a version of the
	// protocol the hub does not.
	ErrProtocolVersion = errors.New("unsupported protocol version")
	// ErrOtherClusterset ends a stream whose cluster is a member of
	// another clusterset than the hub's, and a spoke's session with such a
	// hub.
	ErrOtherClusterset = errors.New("another clusterset")
	// ErrNotAdmitted ends a stream for a cluster the hub does not admit
	// (HubConfig.Admit), or whose shard the Connector would not give it.
	ErrNotAdmitted = errors.New("cluster not admitted")
)

// A ClusterMismatchError ends a stream whose Hello claims a cluster other
// than the one its credential is bound to.
type ClusterMismatchError struct {
	Bound, Claimed federation.ClusterID
}

func (e *ClusterMismatchError) Error() string {
	return fmt.Sprintf("this credential is bound to cluster %q; it cannot publish cluster %q", e.Bound, e.Claimed)
}

// streamError is an error of one of the kinds above with its own message,
// which the hub's adapter passes on to the spoke as it is.
type streamError struct {
	kind  error
	msg   string
	cause error
}

func (e *streamError) Error() string        { return e.msg }
func (e *streamError) Is(target error) bool { return target == e.kind }
func (e *streamError) Unwrap() error        { return e.cause }
