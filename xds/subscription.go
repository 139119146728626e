package xds

import "maps"

// wildcardName is the resource name that subscribes to everything.
const wildcardName = "*"

// subscription is what a delta stream knows of one type: the names the
// proxy subscribes to, whether it subscribes to everything, and the
// versions of the resources it holds. It follows the xDS protocol's rules
// (envoyproxy.io xds_protocol, "How the client specifies what resources to
// return"), as go-control-plane's stream.Subscription does.
//
// The stream's goroutine owns it and is its only writer. The cache reads
// it, under its lock, while a watch is open; the stream cancels the
// type's watch before it changes the subscription, and an answer carries
// what the proxy holds once it has it, which the stream applies when it
// sends it (answered).
type subscription struct {
	wildcard bool
	// legacy is true while the proxy has subscribed no name: an empty
	// first request means everything for the types that allow it.
	legacy bool
	// names is replaced on change, never modified: the proxy book reads
	// the same map, from other goroutines.
	names map[string]struct{}
	// versions are the versions of the resources the proxy holds, by
	// name: for a subscription by name, and for a wildcard one until its
	// first response (what it said it holds, or nothing).
	versions map[string]string
	// set and rev are the set and its revision that a wildcard client
	// holds once answered: from there, the names changed since rev are
	// all that can differ, and the stream keeps no versions.
	set *set
	rev uint64
	// resend are names a wildcard client asked about again (subscribed
	// or unsubscribed by name): its next response says whether they exist.
	resend map[string]struct{}
}

// newSubscription returns the subscription of a type's first request.
// legacyWildcard says whether an empty request subscribes to everything
// for this type.
func newSubscription(subscribe, unsubscribe []string, initial map[string]string, legacyWildcard bool) *subscription {
	s := &subscription{
		wildcard: len(subscribe) == 0 && legacyWildcard,
		legacy:   legacyWildcard,
		names:    map[string]struct{}{},
		versions: initial,
	}
	if s.versions == nil {
		s.versions = map[string]string{}
	}
	s.update(subscribe, unsubscribe)
	return s
}

// update applies a request's subscriptions and unsubscriptions.
func (s *subscription) update(subscribe, unsubscribe []string) {
	if s.legacy {
		if len(subscribe) == 0 {
			return // still wildcard by the legacy rule
		}
		// Naming a resource ends the legacy rule, but the subscription
		// stays wildcard until "*" is unsubscribed.
		s.legacy = false
	}
	if len(subscribe) > 0 || len(unsubscribe) > 0 {
		s.names = maps.Clone(s.names)
	}
	for _, name := range subscribe {
		if name == wildcardName {
			s.wildcard = true
			continue
		}
		s.names[name] = struct{}{}
		if s.versions == nil {
			s.ask(name) // compared in full otherwise, which sends what it lacks
		}
	}
	for _, name := range unsubscribe {
		if name == wildcardName {
			s.wildcard = false
			if s.versions == nil {
				// What it holds is a set revision, not versions: the names
				// it keeps are sent again.
				s.versions = map[string]string{}
			}
			continue
		}
		if _, ok := s.names[name]; ok && s.wildcard {
			// Still wanted through the wildcard: the proxy must be told
			// whether it exists.
			s.ask(name)
		} else {
			delete(s.versions, name)
		}
		delete(s.names, name)
	}
}

// answered records what the proxy holds once it has r, an answer of the
// subscription's watch: the versions it returned (by name), or the set
// revision it brought (wildcard).
func (s *subscription) answered(r *deltaResp) {
	if r.set == nil {
		s.versions = r.returned
		return
	}
	s.versions, s.resend = nil, nil
	s.set, s.rev = r.set, r.rev
}

// ask makes a wildcard client's next response say whether name exists.
func (s *subscription) ask(name string) {
	switch {
	case !s.wildcard:
	case s.versions != nil:
		s.versions[name] = "" // an empty version makes the comparison carry it, or its removal
	default:
		if s.resend == nil {
			s.resend = map[string]struct{}{}
		}
		s.resend[name] = struct{}{}
	}
}
