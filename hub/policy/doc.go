// Package policy is the hub's cluster policy: what each member cluster
// may publish into the clusterset. The spoke's certificate proves which
// cluster a stream speaks for; the policy bounds what that cluster may
// say: the networks and trust domains it may claim, the namespaces it may
// export from and declare gateways in, the address ranges of its
// endpoints, workloads and gateways, and its caps and lease. It is read
// from a YAML file (see docs/security.md) that [Watch] reloads.
package policy
