package main

import "testing"

func TestNormalize_DropsToolNoise(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		in     string
		want   string
	}{
		"VersionLines": {
			reason: "server and pg_dump versions are not part of the schema",
			in:     "--\n-- Dumped from database version 15.18\n-- Dumped by pg_dump version 15.18\n\nCREATE TABLE t ();\n",
			want:   "--\n\nCREATE TABLE t ();\n",
		},
		"RestrictKeys": {
			reason: "newer pg_dump brackets the dump with a random \\restrict key",
			in:     "\\restrict abc\nCREATE TABLE t ();\n\\unrestrict abc\n",
			want:   "CREATE TABLE t ();\n",
		},
		"SessionSettings": {
			reason: "SET lines and the search_path reset are session noise",
			in:     "SET statement_timeout = 0;\nSELECT pg_catalog.set_config('search_path', '', false);\nCREATE TABLE t ();\n",
			want:   "CREATE TABLE t ();\n",
		},
		"BlankRuns": {
			reason: "runs of blank lines squeeze to one",
			in:     "\n\nA;\n\n\n\nB;\n\n",
			want:   "A;\n\nB;\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := normalize(tc.in); got != tc.want {
				t.Errorf("%s\ngot  %q\nwant %q", tc.reason, got, tc.want)
			}
		})
	}
}
