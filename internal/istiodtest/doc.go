// Package istiodtest runs a real, unmodified istiod (pilot-discovery) for
// tests, outside any cluster, against a [kubetest.Cluster]'s API server,
// and talks to it as a proxy does: a raw ADS client ([Dial]) asks for
// clusters and endpoints and waits until they satisfy a condition.
//
// It exists to prove what meshfed feeds istiod through istiod's xds://
// config source (MCP over xDS): a test starts istiod with the config
// sources it chooses ([Options.ConfigSources]), serves ServiceEntries from
// its own MCP server, and reads back the endpoints istiod serves.
//
// The binary is built from the Go module proxy by hack/testassets
// (`make test-istiod`, or `make test-assets-istiod` alone) into
// .cache/testassets/istiod-VERSION and linked as pilot-discovery from the
// folder KUBEBUILDER_ASSETS names. `make test` does not build it (minutes
// on 2 cores), so without it [Start] and [RequireBinary] skip the test and
// say how to get it, unless RequireEnv (MESHFED_REQUIRE_ISTIOD) is set, as
// `make test-istiod` sets it, when they fail the test instead.
//
// Invariants:
//   - One istiod process per [Start], every port on loopback (the ones a
//     test needs picked free beforehand, the others chosen by the kernel),
//     its working directory and log in the test's temporary directory,
//     stopped in t.Cleanup; its log's tail is printed when it fails.
//   - [Start] returns once istiod is ready (its /ready answers 200) and its
//     xDS port accepts connections: every config source has synced.
//   - istiod reads its mesh config and mesh networks from files written
//     once; no remote secrets: istiod sees the one cluster it is given.
//   - A change reaches istiod through a watch or its MCP stream and then a
//     debounced push, so tests wait for what a proxy sees
//     ([ADSClient.WaitEDS]) rather than asking once.
package istiodtest
