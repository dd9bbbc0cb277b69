package schemacache

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSchema_KeepsOneGenerationPerAxis(t *testing.T) {
	t.Parallel()
	c := New()
	v1 := json.RawMessage(`{"type":"object","required":["a"]}`)
	v2 := json.RawMessage(`{"type":"object","required":["b"]}`)

	s1, err := c.Schema("vpc", "v1", Spec, 1, v1)
	require.NoError(t, err)
	again, err := c.Schema("vpc", "v1", Spec, 1, v1)
	require.NoError(t, err)
	require.Same(t, s1, again, "a hit at the same generation returns the compiled schema")

	s2, err := c.Schema("vpc", "v1", Spec, 2, v2)
	require.NoError(t, err)
	require.NotSame(t, s1, s2)
	require.Equal(t, 1, c.Len(), "a newer generation replaces the entry: the cache never grows per apply")
	require.NoError(t, s2.Validate(json.RawMessage(`{"b":1}`)))
	require.Error(t, s2.Validate(json.RawMessage(`{"a":1}`)))

	old, err := c.Schema("vpc", "v1", Spec, 1, v1)
	require.NoError(t, err)
	require.NoError(t, old.Validate(json.RawMessage(`{"a":1}`)), "an older generation compiles its own document")
	cur, err := c.Schema("vpc", "v1", Spec, 2, v2)
	require.NoError(t, err)
	require.Same(t, s2, cur, "an older lookup does not displace the newer entry")

	_, err = c.Schema("vpc", "v1", Config, 2, nil)
	require.NoError(t, err)
	require.Equal(t, 2, c.Len(), "axes are cached apart")
}
