package manifest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWholeNumber(t *testing.T) {
	t.Parallel()
	type result struct {
		N  int
		OK bool
	}
	cases := map[string]struct {
		reason string
		lit    string
		want   result
	}{
		"Zero":          {reason: "zero", lit: "0", want: result{0, true}},
		"NegativeZero":  {reason: "-0 is zero, not negative", lit: "-0", want: result{0, true}},
		"ZeroExponent":  {reason: "0e999 is zero", lit: "0.000e999", want: result{0, true}},
		"Plain":         {reason: "an integer literal", lit: "50", want: result{50, true}},
		"TrailingZeros": {reason: "10.000 is ten", lit: "10.000", want: result{10, true}},
		"Exponent":      {reason: "1e2 is a hundred", lit: "1e2", want: result{100, true}},
		"NegExponent":   {reason: "3000E-1 is three hundred", lit: "3000E-1", want: result{300, true}},
		"Max":           {reason: "the int4 maximum", lit: "2147483647", want: result{2147483647, true}},
		"MaxExponent":   {reason: "the int4 maximum, written with an exponent", lit: "2.147483647e9", want: result{2147483647, true}},
		"PastMax":       {reason: "one past int4", lit: "2147483648", want: result{0, false}},
		"Fraction":      {reason: "1.5 has a fraction", lit: "1.5", want: result{0, false}},
		"TinyFraction":  {reason: "exact: no float rounding hides a fraction", lit: "1.0000000000000000000000000000001", want: result{0, false}},
		"SmallExp":      {reason: "15e-1 is 1.5", lit: "15e-1", want: result{0, false}},
		"Negative":      {reason: "negatives are out", lit: "-1", want: result{0, false}},
		"NegFraction":   {reason: "a negative fraction is out", lit: "-0.5", want: result{0, false}},
		"Huge":          {reason: "an astronomically large exponent", lit: "1e99999999999999999999", want: result{0, false}},
		"HugeNegExp":    {reason: "an astronomically small exponent is a fraction", lit: "1e-99999999999999999999", want: result{0, false}},
		"LeadingZeros":  {reason: "leading zeros in the fraction are not digits", lit: "0.5e1", want: result{5, true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n, ok := wholeNumber(tc.lit, maxPolicyInt)
			if diff := cmp.Diff(tc.want, result{n, ok}); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCheckEscapes(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		raw    string
		want   bool // true = accepted
	}{
		"Plain":            {reason: "no escapes", raw: `{"a": "b"}`, want: true},
		"Pair":             {reason: "a surrogate pair is one character", raw: `"\ud83d\ude80"`, want: true},
		"EscapedBackslash": {reason: `\\u0000 is a backslash then text`, raw: `"\\u0000"`, want: true},
		"Nul":              {reason: `\u0000 cannot be stored in text`, raw: `"a\u0000"`, want: false},
		"NulInKey":         {reason: "keys are text too", raw: `{"\u0000": 1}`, want: false},
		"LoneHigh":         {reason: "a high surrogate needs a low one next", raw: `"\ud83d"`, want: false},
		"HighThenChar":     {reason: "a high surrogate followed by a character", raw: `"\ud83dx"`, want: false},
		"HighThenEscape":   {reason: "a high surrogate followed by another escape", raw: `"\ud83d\n"`, want: false},
		"HighHigh":         {reason: "two high surrogates", raw: `"\ud83d\ud83d"`, want: false},
		"LoneLow":          {reason: "a low surrogate needs a high one before", raw: `"\ude80"`, want: false},
		"BMP":              {reason: "an ordinary escape", raw: `"caf\u00e9"`, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := checkEscapes([]byte(tc.raw))
			if diff := cmp.Diff(tc.want, err == nil); diff != "" {
				t.Errorf("%s (err %v)\n-want +got:\n%s", tc.reason, err, diff)
			}
		})
	}
}
