package debughttp

import "flag"

// AddFlags declares the debug port's switches on fs, shared by the hub
// and the spoke: --debug-cmdline into cmdline and --debug-hosts into
// hosts.
func AddFlags(fs *flag.FlagSet, cmdline *bool, hosts *[]string) {
	fs.BoolVar(cmdline, "debug-cmdline", *cmdline, "serve /debug/pprof/cmdline (it shows the command line, key paths included)")
	fs.Func("debug-hosts", "comma-separated Host names a loopback --debug-addr accepts besides localhost and IP addresses (others are refused against DNS rebinding)", func(v string) (err error) {
		*hosts, err = ParseHosts(v)
		return err
	})
}
