// Package jsonb checks that a document is one Postgres can store as jsonb,
// in one pass over its bytes.
//
// Postgres refuses more than malformed JSON: an escape of a UTF-16
// surrogate that is not one half of a pair ("\ud800"), the escape
// "\u0000", and invalid UTF-8. encoding/json.Valid accepts all three, so a
// worker's status holding one passed the broker's check and failed the
// outbox insert of every result batched with it (and a compose's child
// spec, its whole compose). Check refuses each, naming it, before anything
// is written; a document it accepts, Postgres accepts (TestCheck_AgreesWithPostgres).
//
// It is also the hot path's one JSON check: a worker's result documents
// and a compose's child specs pass through it, about twice as fast as
// encoding/json.Valid's scanner, which calls a function per byte (241 ns
// against 472 for a 167-byte spec: BenchmarkCheck).
package jsonb

import (
	"errors"
	"unicode/utf8"
)

// The ways a document can be refused.
var (
	ErrSyntax    = errors.New("not valid JSON")
	ErrDepth     = errors.New("nested deeper than 10000 arrays and objects")
	ErrUTF8      = errors.New("holds invalid UTF-8, which cannot be stored")
	ErrNUL       = errors.New(`holds the escape \u0000, which cannot be stored`)
	ErrSurrogate = errors.New("holds an escaped UTF-16 surrogate that is not half of a pair, which cannot be stored")
)

// MaxDepth is the deepest nesting of arrays and objects Check accepts (as
// encoding/json does).
const MaxDepth = 10000

// Check returns nil if doc is one JSON value (RFC 8259, surrounding
// whitespace allowed) that Postgres stores as jsonb, or the first reason
// it is not: ErrSyntax or ErrDepth before the others, which are only
// reported of a well-formed document.
func Check(doc []byte) error {
	c := checker{doc: doc}
	if !c.document() {
		if c.tooDeep {
			return ErrDepth
		}
		return ErrSyntax
	}
	return c.storable
}

type checker struct {
	doc      []byte
	i        int
	tooDeep  bool
	storable error // the first ErrUTF8, ErrNUL or ErrSurrogate met
	// depth is how many arrays and objects the value at i is inside; a
	// bit a level says which is an object: the first 64 in shallow, the
	// rest in deep (no recursion, so no depth costs a stack, and a
	// document of ordinary depth allocates nothing).
	depth   int
	shallow uint64
	deep    []uint64
}

// setObject notes whether the array or object opened at level is an object.
func (c *checker) setObject(level int, obj bool) {
	word, bit := &c.shallow, uint64(1)<<(level%64)
	if level >= 64 {
		if w := level/64 - 1; w == len(c.deep) {
			c.deep = append(c.deep, 0)
		}
		word = &c.deep[level/64-1]
	}
	if obj {
		*word |= bit
	} else {
		*word &^= bit
	}
}

// isObject reports whether the array or object opened at level is an object.
func (c *checker) isObject(level int) bool {
	word := c.shallow
	if level >= 64 {
		word = c.deep[level/64-1]
	}
	return word&(1<<(level%64)) != 0
}

// document scans one value and the whitespace around it, to the end.
func (c *checker) document() bool {
	c.space()
	for {
		if !c.value() {
			return false
		}
		// After a value: close what it ends, or go on to the next.
		for {
			c.space()
			if c.depth == 0 {
				return c.i == len(c.doc)
			}
			if c.i == len(c.doc) {
				return false
			}
			inObject := c.isObject(c.depth - 1)
			switch b := c.doc[c.i]; {
			case b == ',':
				c.i++
				c.space()
				if inObject && !c.key() {
					return false
				}
			case b == '}' && inObject, b == ']' && !inObject:
				c.i++
				c.depth--
				continue
			default:
				return false
			}
			break
		}
	}
}

// value scans one value; an array or object is only opened (its first
// member scanned, or its end if empty).
func (c *checker) value() bool {
	for {
		if c.i == len(c.doc) {
			return false
		}
		switch b := c.doc[c.i]; b {
		case '{', '[':
			if c.depth == MaxDepth {
				c.tooDeep = true
				return false
			}
			c.setObject(c.depth, b == '{')
			c.depth++
			c.i++
			c.space()
			if c.i < len(c.doc) && c.doc[c.i] == b+2 { // '}' is '{'+2, ']' is '['+2
				c.i++
				c.depth--
				return true
			}
			if b == '{' && !c.key() {
				return false
			}
			continue // the first member's value
		case '"':
			return c.str()
		case 't':
			return c.literal("true")
		case 'f':
			return c.literal("false")
		case 'n':
			return c.literal("null")
		default:
			return c.number()
		}
	}
}

// key scans an object member's name and its colon, and the space after.
func (c *checker) key() bool {
	if c.i == len(c.doc) || c.doc[c.i] != '"' || !c.str() {
		return false
	}
	c.space()
	if c.i == len(c.doc) || c.doc[c.i] != ':' {
		return false
	}
	c.i++
	c.space()
	return true
}

func (c *checker) space() {
	d, i := c.doc, c.i
	for i < len(d) && (d[i] == ' ' || d[i] == '\n' || d[i] == '\t' || d[i] == '\r') {
		i++
	}
	c.i = i
}

func (c *checker) literal(word string) bool {
	if len(c.doc)-c.i < len(word) || string(c.doc[c.i:c.i+len(word)]) != word {
		return false
	}
	c.i += len(word)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *checker) number() bool {
	d := c.doc
	if c.i < len(d) && d[c.i] == '-' {
		c.i++
	}
	switch {
	case c.i < len(d) && d[c.i] == '0':
		c.i++
	case c.i < len(d) && d[c.i] >= '1' && d[c.i] <= '9':
		c.digits()
	default:
		return false
	}
	if c.i < len(d) && d[c.i] == '.' {
		c.i++
		if !c.digits() {
			return false
		}
	}
	if c.i < len(d) && (d[c.i] == 'e' || d[c.i] == 'E') {
		c.i++
		if c.i < len(d) && (d[c.i] == '+' || d[c.i] == '-') {
			c.i++
		}
		if !c.digits() {
			return false
		}
	}
	return true
}

// digits scans one or more digits.
func (c *checker) digits() bool {
	d, i := c.doc, c.i
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	ok := i > c.i
	c.i = i
	return ok
}

// str scans a string from its opening quote, noting what Postgres would
// refuse in it.
func (c *checker) str() bool {
	d, i := c.doc, c.i+1 // past the opening quote
	for {
		for i < len(d) && plain[d[i]] {
			i++
		}
		if i == len(d) {
			return false
		}
		switch b := d[i]; {
		case b == '"':
			c.i = i + 1
			return true
		case b == '\\':
			c.i = i
			if !c.escape() {
				return false
			}
			i = c.i
		case b < 0x20:
			return false
		default:
			r, n := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && n == 1 {
				c.refuse(ErrUTF8)
			}
			i += n
		}
	}
}

// escape scans one escape from its backslash.
func (c *checker) escape() bool {
	d := c.doc
	if c.i+1 >= len(d) {
		return false
	}
	switch d[c.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		c.i += 2
		return true
	case 'u':
	default:
		return false
	}
	u, ok := hex4(d, c.i+2)
	if !ok {
		return false
	}
	c.i += 6
	switch {
	case u == 0:
		c.refuse(ErrNUL)
	case u >= 0xDC00 && u <= 0xDFFF: // a low half with no high one before it
		c.refuse(ErrSurrogate)
	case u >= 0xD800 && u <= 0xDBFF: // a high half: a low one must follow
		if c.i+1 < len(d) && d[c.i] == '\\' && d[c.i+1] == 'u' {
			low, ok := hex4(d, c.i+2)
			if !ok {
				return false
			}
			c.i += 6
			if low < 0xDC00 || low > 0xDFFF {
				c.refuse(ErrSurrogate)
				if low == 0 {
					c.refuse(ErrNUL)
				}
			}
			return true
		}
		c.refuse(ErrSurrogate)
	}
	return true
}

// plain marks the bytes a string holds as they are: ASCII but a control
// character, the quote and the backslash.
var plain = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// hex4 reads the four hex digits at d[i:].
func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var u rune
	for _, b := range d[i : i+4] {
		switch {
		case b >= '0' && b <= '9':
			u = u<<4 | rune(b-'0')
		case b >= 'a' && b <= 'f':
			u = u<<4 | rune(b-'a'+10)
		case b >= 'A' && b <= 'F':
			u = u<<4 | rune(b-'A'+10)
		default:
			return 0, false
		}
	}
	return u, true
}

// refuse notes err unless a reason is noted already.
func (c *checker) refuse(err error) {
	if c.storable == nil {
		c.storable = err
	}
}
