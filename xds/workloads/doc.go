// Package workloads turns the clusterset into Istio ambient's workload API
// (istio.workload.Address resources) for ztunnels, incrementally.
//
// What a ztunnel sees depends only on its network, as in istiod's
// multi-network ambient support:
//   - every merged service (name namespace/hostname), with the union of the
//     clusters' VIPs tagged with their networks;
//   - every east-west gateway as a workload (NetworkGateway/<net>/<addr>/<port>);
//   - the workloads of its own network as they are;
//   - for each other network with a gateway and each service with workloads
//     there, one address-less workload reached through that gateway, whose
//     capacity is the number of workloads it stands for.
//
// A [Builder] keeps the indexes that make a push proportional to what
// changed; its output says, per resource, which networks see it.
package workloads
