package stdcel

import (
	"fmt"
	"strconv"
	"strings"
)

// segment is one piece of a template string: literal text, or an
// expression (the source between ${ and }).
type segment struct {
	text string
	expr bool
}

// scan splits s into literal text and ${…} expressions. Braces and quotes
// inside an expression are balanced, so map literals and strings holding
// "}" work; "$${" is a literal "${".
func scan(s string) ([]segment, error) {
	var out []segment
	var lit strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			lit.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			lit.WriteByte(s[i])
			i++
			continue
		}
		end, err := exprEnd(s, i+2)
		if err != nil {
			return nil, err
		}
		if lit.Len() > 0 {
			out = append(out, segment{text: lit.String()})
			lit.Reset()
		}
		src := strings.TrimSpace(s[i+2 : end])
		if src == "" {
			return nil, fmt.Errorf("empty expression ${} at offset %d", i)
		}
		out = append(out, segment{text: src, expr: true})
		i = end + 1
	}
	if lit.Len() > 0 {
		out = append(out, segment{text: lit.String()})
	}
	return out, nil
}

// exprEnd finds the } closing the expression starting at from.
func exprEnd(s string, from int) (int, error) {
	depth := 0
	var quote byte
	for i := from; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '{':
			depth++
		case c == '}' && depth == 0:
			return i, nil
		case c == '}':
			depth--
		}
	}
	return 0, fmt.Errorf("unterminated expression starting at offset %d (a ${ without its })", from-2)
}

// pointer appends a JSON pointer token (RFC 6901) to p.
func pointer(p string, token string) string {
	return p + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

func indexPointer(p string, i int) string { return p + "/" + strconv.Itoa(i) }
