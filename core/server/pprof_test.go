package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckPprofAddr_LoopbackOnly: profiles expose memory contents, so the
// only addresses accepted are off ("") and loopback ones; every refusal
// names the variable and the address.
func TestCheckPprofAddr_LoopbackOnly(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		addr    string
		wantErr string // "" accepts
	}{
		"off":                      {addr: ""},
		"IPv4 loopback":            {addr: "127.0.0.1:6060"},
		"anywhere in 127/8":        {addr: "127.0.0.2:6060"},
		"IPv6 loopback":            {addr: "[::1]:6060"},
		"localhost":                {addr: "localhost:6060"},
		"an ephemeral port":        {addr: "127.0.0.1:0"},
		"every interface":          {addr: "0.0.0.0:6060", wantErr: `PPROF_ADDR="0.0.0.0:6060": profiling is served on loopback only`},
		"every interface, no host": {addr: ":6060", wantErr: `PPROF_ADDR=":6060": profiling is served on loopback only`},
		"IPv6 any":                 {addr: "[::]:6060", wantErr: "loopback only"},
		"a private address":        {addr: "10.0.0.5:6060", wantErr: "loopback only"},
		"a host name":              {addr: "pprof.internal:6060", wantErr: "loopback only"},
		"a name that looks local":  {addr: "localhost.example.com:6060", wantErr: "loopback only"},
		"no port":                  {addr: "127.0.0.1", wantErr: `PPROF_ADDR="127.0.0.1": want host:port`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := CheckPprofAddr("PPROF_ADDR", c.addr)
			if c.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.wantErr)
		})
	}
}
