package main

import "github.com/converge-run/converge/core/app"

// mounts lists the handlers the API listener serves beyond probes, metrics
// and the broker.
func mounts() []app.Mount { return nil }
