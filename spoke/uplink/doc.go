// Package uplink is the spoke's federation client: it keeps one Sync stream
// open to the hub, reconnecting with jittered exponential backoff, resumes
// from the last acknowledged version when the hub still has it, and sends
// the tracker's updates one at a time, chunked below the hub's message
// limit.
package uplink
