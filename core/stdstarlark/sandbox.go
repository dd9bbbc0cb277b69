package stdstarlark

import (
	"fmt"
	"strings"

	starlarkjson "go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

// The sandbox bounds what one step may build, so that the step budget and
// the time limit also bound memory: no value a program makes — a string,
// list, tuple or dict, an int's bits, or the text str(), repr(), print(),
// fail(), % and format() render — may be larger than these, checked before it is
// built. A value grown one element a step (a comprehension, append, a key
// set by index) is refused at the element past MaxLen (growth.go).
const (
	// MaxLen is the most elements of a list, tuple, dict or set, and the
	// most bytes of a string, one operation may produce (or a comprehension,
	// or growth one element at a time).
	MaxLen = 1 << 20
	// MaxIntBits is the most bits of an int +, *, << or int() may produce.
	MaxIntBits = 1 << 16
	// MaxDepth is the deepest nesting of compose's result (and of a value
	// json.encode, str or repr may render, or of the text json.decode
	// reads).
	MaxDepth = 100
)

// The names the rewritten program calls; the scanner cannot produce them,
// so a program can neither call nor shadow them.
const (
	operandFn = "·operand"
	methodFn  = "·method"
)

// guardedBuiltins wraps the universe's built-ins that materialise an
// iterable (list(range(1 << 30)) is one step), render a value as text
// (fail's message included), parse an int or decode JSON.
func guardedBuiltins() starlark.StringDict {
	d := starlark.StringDict{operandFn: starlark.NewBuiltin(operandFn, wrapOperand), methodFn: starlark.NewBuiltin(methodFn, boundMethod),
		compBeginFn: starlark.NewBuiltin(compBeginFn, beginComprehension), compElemFn: starlark.NewBuiltin(compElemFn, comprehensionElement),
		growFn: starlark.NewBuiltin(growFn, grow)}
	for _, name := range []string{"list", "tuple", "sorted", "dict", "set", "enumerate", "zip", "reversed"} {
		if b, ok := starlark.Universe[name].(*starlark.Builtin); ok {
			d[name] = starlark.NewBuiltin(name, checkArgsLen(b))
		}
	}
	for _, name := range []string{"str", "repr", "print", "fail"} {
		if b, ok := starlark.Universe[name].(*starlark.Builtin); ok {
			d[name] = starlark.NewBuiltin(name, checkRendered(b))
		}
	}
	if b, ok := starlark.Universe["int"].(*starlark.Builtin); ok {
		d["int"] = starlark.NewBuiltin("int", checkInt(b))
	}
	json := starlark.StringDict{}
	for name, v := range starlarkjson.Module.Members {
		json[name] = v
		if b, ok := v.(*starlark.Builtin); ok && name == "encode" {
			json[name] = starlark.NewBuiltin("json."+name, checkRendered(b))
		}
		if b, ok := v.(*starlark.Builtin); ok && (name == "encode_indent" || name == "indent") {
			json[name] = starlark.NewBuiltin("json."+name, checkIndented(b))
		}
		if b, ok := v.(*starlark.Builtin); ok && name == "decode" {
			json[name] = starlark.NewBuiltin("json.decode", checkDecoded(b))
		}
	}
	d["json"] = &starlarkstruct.Module{Name: "json", Members: json}
	return d
}

func tooLarge(what string, n int) error {
	return fmt.Errorf("%s would hold %d elements (bytes for a string), more than the sandbox's limit of %d per value (MaxLen)", what, n, MaxLen)
}

// checkArgsLen refuses to materialise an argument longer than MaxLen.
func checkArgsLen(b *starlark.Builtin) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		for _, a := range args {
			if n := starlark.Len(a); n > MaxLen {
				return nil, tooLarge(b.Name()+"()", n)
			}
		}
		return starlark.Call(thread, b, args, kwargs)
	}
}

// checkInt refuses int() of a string longer than any int of MaxIntBits is
// written in (base 2, with a sign and a prefix), before parsing it (a
// base-10 parse takes time quadratic in the digits, uncancelled: a 1 MB
// string took seconds past the time limit), and an int it parses wider
// than MaxIntBits.
func checkInt(b *starlark.Builtin) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) > 0 {
			if s, ok := starlark.AsString(args[0]); ok && len(s) > MaxIntBits+3 {
				return nil, fmt.Errorf("int: a string of %d bytes is longer than any int within the sandbox's limit of %d bits (MaxIntBits)",
					len(s), MaxIntBits)
			}
		}
		v, err := starlark.Call(thread, b, args, kwargs)
		if err != nil {
			return nil, err
		}
		if n := bits(v); n > MaxIntBits {
			return nil, fmt.Errorf("int: the int would have %d bits, more than the sandbox's limit of %d (MaxIntBits)", n, MaxIntBits)
		}
		return v, nil
	}
}

// checkDecoded refuses to decode JSON text nested deeper than MaxDepth:
// the decoder recurses once per level, uncancelled (a megabyte of "["
// took 19 s past a 2 s time limit).
func checkDecoded(b *starlark.Builtin) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) > 0 {
			if s, ok := starlark.AsString(args[0]); ok && nestsDeeper(s, MaxDepth) {
				return nil, fmt.Errorf("json.decode: the text nests deeper than %d (MaxDepth)", MaxDepth)
			}
		}
		return starlark.Call(thread, b, args, kwargs)
	}
}

// nestsDeeper reports whether JSON text s opens more than limit arrays or
// objects inside one another (brackets within strings do not count).
func nestsDeeper(s string, limit int) bool {
	depth, inString := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > limit {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

// checkIndented is checkRendered for json.indent and json.encode_indent,
// which also write the prefix and the indent (once per level) on every line
// of their text: a long indent on a long list is larger than both.
func checkIndented(b *starlark.Builtin) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if err := renderedArgs(b.Name(), args, nil); err != nil {
			return nil, err
		}
		prefix, indent := 0, 1 // "" and "\t", the defaults
		for _, kv := range kwargs {
			if s, ok := kv[1].(starlark.String); ok {
				switch kv[0] {
				case starlark.String("prefix"):
					prefix = len(s)
				case starlark.String("indent"):
					indent = len(s)
				}
			}
		}
		if len(args) != 1 {
			return starlark.Call(thread, b, args, kwargs) // its own error
		}
		text, ok := starlark.AsString(args[0])
		if b.Name() == "json.encode_indent" || !ok {
			encoded, err := starlark.Call(thread, starlarkjson.Module.Members["encode"], args[:1], nil)
			if err != nil {
				return starlark.Call(thread, b, args, kwargs) // its own error
			}
			text, _ = starlark.AsString(encoded)
		}
		if indentedLonger(text, prefix, indent, MaxLen) {
			return nil, fmt.Errorf("%s: the text would be longer than the sandbox's limit of %d bytes (MaxLen)", b.Name(), MaxLen)
		}
		return starlark.Call(thread, b, args, kwargs)
	}
}

// indentedLonger reports whether JSON text, indented with a prefix and an
// indent of those lengths, could be longer than limit: every bracket and
// comma outside strings starts a line of the prefix and the indent once
// per level, every colon gains a space.
func indentedLonger(text string, prefix, indent, limit int) bool {
	n, depth, inString := len(text), 0, false
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case inString && c == '\\':
			i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			n += 1 + prefix + indent*depth
		case c == ']' || c == '}':
			depth = max(depth-1, 0)
			n += 1 + prefix + indent*depth
		case c == ',':
			n += 1 + prefix + indent*depth
		case c == ':':
			n++
		}
		if n > limit {
			return true
		}
	}
	return false
}

// checkRendered refuses to render arguments whose text would be larger
// than MaxLen (a list repeating a large list renders it many times) or
// deeper than MaxDepth.
func checkRendered(b *starlark.Builtin) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if err := renderedArgs(b.Name(), args, kwargs); err != nil {
			return nil, err
		}
		return starlark.Call(thread, b, args, kwargs)
	}
}

// renderedArgs refuses arguments (and a sep between them) whose text
// would be longer than MaxLen or deeper than MaxDepth.
func renderedArgs(name string, args starlark.Tuple, kwargs []starlark.Tuple) error {
	budget := MaxLen
	for _, kv := range kwargs {
		// print's and fail's sep goes between every two arguments.
		if sep, ok := kv[1].(starlark.String); ok && kv[0] == starlark.String("sep") && len(args) > 1 {
			if n := len(args) - 1; len(sep) > budget/n {
				return fmt.Errorf("%s: the text would be longer than the sandbox's limit of %d bytes (MaxLen)", name, MaxLen)
			}
			budget -= len(sep) * (len(args) - 1)
		}
	}
	for _, a := range args {
		n, err := rendered(a, budget, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		budget -= n
	}
	return nil
}

// rendered estimates (from above, roughly) the length of v's text, failing
// once it passes budget or MaxDepth; its work is bounded by budget.
func rendered(v starlark.Value, budget, depth int) (int, error) {
	if depth > MaxDepth {
		return 0, fmt.Errorf("a value nested deeper than %d (MaxDepth)", MaxDepth)
	}
	n := 0
	add := func(k int) error {
		n += k
		if n > budget {
			return fmt.Errorf("the text would be longer than the sandbox's limit of %d bytes (MaxLen)", MaxLen)
		}
		return nil
	}
	var elems []starlark.Value
	switch v := v.(type) {
	case starlark.String:
		return n, add(2*len(v) + 2)
	case starlark.Bytes:
		return n, add(4*len(v) + 3)
	case starlark.Int:
		return n, add(v.BigInt().BitLen()/3 + 2)
	case *starlark.List:
		for i := range v.Len() {
			elems = append(elems, v.Index(i))
		}
	case starlark.Tuple:
		elems = v
	case *starlark.Dict:
		for _, kv := range v.Items() {
			elems = append(elems, kv[0], kv[1])
		}
	case *starlark.Set:
		iter := v.Iterate()
		var x starlark.Value
		for iter.Next(&x) {
			elems = append(elems, x)
		}
		iter.Done()
	default:
		return n, add(32)
	}
	if err := add(2); err != nil {
		return n, err
	}
	for _, e := range elems {
		k, err := rendered(e, budget-n, depth+1)
		if err != nil {
			return n, err
		}
		if err := add(k + 2); err != nil {
			return n, err
		}
	}
	return n, nil
}

// rewrite makes every +, *, %, << and | (and +=, *=, %=, <<=, |=) go
// through an operand whose Binary checks the result's size first, and
// every method call through methodFn, which checks the methods that can
// grow a value (replace, join, format, extend, append, insert, add,
// setdefault, update, union); comprehensions and index assignments are
// guarded (guardGrowth).
func rewrite(f *syntax.File) {
	syntax.Walk(f, func(n syntax.Node) bool {
		guardGrowth(n)
		switch n := n.(type) {
		case *syntax.BinaryExpr:
			if n.Op == syntax.PLUS || n.Op == syntax.STAR || n.Op == syntax.PERCENT || n.Op == syntax.LTLT || n.Op == syntax.PIPE {
				n.X = call(operandFn, n.OpPos, n.X)
			}
		case *syntax.AssignStmt:
			switch n.Op {
			case syntax.PLUS_EQ, syntax.PIPE_EQ:
				// In place for a list (+=) and a dict (|=): the operand on
				// the right extends it.
				n.RHS = call(operandFn, n.OpPos, n.RHS)
			case syntax.STAR_EQ, syntax.PERCENT_EQ, syntax.LTLT_EQ:
				// x *= y is x = x * y (only += is in place in Starlark).
				op := map[syntax.Token]syntax.Token{syntax.STAR_EQ: syntax.STAR, syntax.PERCENT_EQ: syntax.PERCENT, syntax.LTLT_EQ: syntax.LTLT}[n.Op]
				n.Op = syntax.EQ
				n.RHS = &syntax.BinaryExpr{X: shallowCopy(n.LHS), OpPos: n.OpPos, Op: op, Y: n.RHS}
			}
		case *syntax.CallExpr:
			if dot, ok := n.Fn.(*syntax.DotExpr); ok {
				n.Fn = call(methodFn, dot.Dot, dot.X, &syntax.Literal{Token: syntax.STRING, TokenPos: dot.NamePos,
					Raw: fmt.Sprintf("%q", dot.Name.Name), Value: dot.Name.Name})
			}
		}
		return true
	})
}

func call(fn string, pos syntax.Position, args ...syntax.Expr) *syntax.CallExpr {
	return &syntax.CallExpr{Fn: &syntax.Ident{NamePos: pos, Name: fn}, Lparen: pos, Args: args, Rparen: pos}
}

// shallowCopy copies an augmented assignment's target for its use on the
// right (an index or attribute target's operands are evaluated twice).
func shallowCopy(e syntax.Expr) syntax.Expr {
	switch e := e.(type) {
	case *syntax.Ident:
		return &syntax.Ident{NamePos: e.NamePos, Name: e.Name}
	case *syntax.IndexExpr:
		c := *e
		return &c
	case *syntax.DotExpr:
		c := *e
		return &c
	}
	return e
}

// operand is a value about to be the left operand of +, *, % or << (or the
// right one of +=): its Binary checks the size of the result first.
type operand struct{ v starlark.Value }

func wrapOperand(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	if o, ok := args[0].(operand); ok {
		return o, nil
	}
	return operand{args[0]}, nil
}

func (o operand) String() string        { return o.v.String() }
func (o operand) Type() string          { return o.v.Type() }
func (o operand) Freeze()               { o.v.Freeze() }
func (o operand) Truth() starlark.Bool  { return o.v.Truth() }
func (o operand) Hash() (uint32, error) { return o.v.Hash() }

// Binary applies op after checking the result's size. On the right side
// it is +=: a list is extended in place, as Starlark does.
func (o operand) Binary(op syntax.Token, y starlark.Value, side starlark.Side) (starlark.Value, error) {
	x := o.v
	if side == starlark.Right {
		x, y = y, o.v
	}
	if err := checkBinary(op, x, y); err != nil {
		return nil, err
	}
	if side == starlark.Right && op == syntax.PIPE {
		xd, ok1 := x.(*starlark.Dict)
		yd, ok2 := y.(*starlark.Dict)
		if ok1 && ok2 {
			for _, kv := range yd.Items() { // first, so that d |= d works
				if err := xd.SetKey(kv[0], kv[1]); err != nil {
					return nil, err
				}
			}
			return xd, nil
		}
	}
	if side == starlark.Right && op == syntax.PLUS {
		if list, ok := x.(*starlark.List); ok {
			if iter, ok := y.(starlark.Iterable); ok {
				var elems []starlark.Value // first, so that x += x works
				it := iter.Iterate()
				var e starlark.Value
				for it.Next(&e) {
					elems = append(elems, e)
				}
				it.Done()
				for _, e := range elems {
					if err := list.Append(e); err != nil {
						return nil, err
					}
				}
				return list, nil
			}
		}
	}
	return starlark.Binary(op, x, y)
}

func sizeOf(v starlark.Value) int {
	switch v := v.(type) {
	case starlark.String:
		return len(v)
	case starlark.Bytes:
		return len(v)
	case starlark.Sequence: // list, tuple, range, dict
		return v.Len()
	}
	return -1
}

func bits(v starlark.Value) int {
	if i, ok := v.(starlark.Int); ok {
		return i.BigInt().BitLen()
	}
	return -1
}

// checkBinary refuses an x op y whose result would pass MaxLen or
// MaxIntBits, before it is built.
func checkBinary(op syntax.Token, x, y starlark.Value) error {
	switch op {
	case syntax.PIPE:
		if a, b := sizeOf(x), sizeOf(y); a >= 0 && b >= 0 && a+b > MaxLen {
			return tooLarge(x.Type()+" | "+y.Type(), a+b)
		}
	case syntax.PLUS:
		if a, b := sizeOf(x), sizeOf(y); a >= 0 && b >= 0 && a+b > MaxLen {
			return tooLarge(x.Type()+" + "+y.Type(), a+b)
		}
		if a, b := bits(x), bits(y); a >= 0 && b >= 0 && max(a, b)+1 > MaxIntBits {
			return fmt.Errorf("int + int would have %d bits, more than the sandbox's limit of %d (MaxIntBits)", max(a, b)+1, MaxIntBits)
		}
	case syntax.STAR:
		if a, b := bits(x), bits(y); a >= 0 && b >= 0 && a+b > MaxIntBits {
			return fmt.Errorf("int * int would have %d bits, more than the sandbox's limit of %d (MaxIntBits)", a+b, MaxIntBits)
		}
		seq, count := x, y
		if sizeOf(x) < 0 {
			seq, count = y, x
		}
		n, ok := count.(starlark.Int)
		if s := sizeOf(seq); s > 0 && ok {
			k, exact := n.Int64()
			if !exact || (k > 0 && k > int64(MaxLen/s)) {
				return tooLarge(seq.Type()+" repeated "+n.String()+" times", int(min(int64(s)*k, 1<<62)))
			}
		}
	case syntax.LTLT:
		if a := bits(x); a >= 0 {
			if k, err := starlark.AsInt32(y); err == nil && k > 0 && a+k > MaxIntBits {
				return fmt.Errorf("int << %d would have %d bits, more than the sandbox's limit of %d (MaxIntBits)", k, a+k, MaxIntBits)
			}
		}
	case syntax.PERCENT:
		if f, ok := x.(starlark.String); ok {
			return checkInterpolation(string(f), strings.Count(string(f), "%"), y)
		}
	}
	return nil
}

// checkInterpolation bounds a format's text: the format plus, per
// placeholder, the largest argument's text.
func checkInterpolation(format string, placeholders int, args starlark.Value) error {
	var vals []starlark.Value
	switch a := args.(type) {
	case starlark.Tuple:
		vals = a
	case *starlark.Dict:
		for _, kv := range a.Items() {
			vals = append(vals, kv[1])
		}
	default:
		vals = []starlark.Value{a}
	}
	largest := 0
	for _, v := range vals {
		n, err := rendered(v, MaxLen, 0)
		if err != nil {
			return err
		}
		largest = max(largest, n)
	}
	if total := len(format) + placeholders*largest; largest > 0 && placeholders > MaxLen/largest || total > MaxLen {
		return fmt.Errorf("the formatted string would be longer than the sandbox's limit of %d bytes (MaxLen)", MaxLen)
	}
	return nil
}

// boundMethod is x.name, checked before the call for the methods that can
// build more than one step's worth: replace, join, format, extend.
func boundMethod(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	x, name := args[0], string(args[1].(starlark.String))
	m, err := getAttr(x, name)
	if err != nil || m == nil {
		return m, err
	}
	b, ok := m.(*starlark.Builtin)
	if !ok {
		return m, nil
	}
	switch name {
	case "replace", "join", "format", "extend", "append", "insert", "add", "setdefault", "update", "union":
	default:
		return m, nil
	}
	return starlark.NewBuiltin(b.Name(), func(thread *starlark.Thread, _ *starlark.Builtin, a starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		if err := checkMethod(x, name, a, kw); err != nil {
			return nil, fmt.Errorf("%s: %w", b.Name(), err)
		}
		return starlark.Call(thread, b, a, kw)
	}), nil
}

// getAttr is x.name with Starlark's own error for a missing attribute.
func getAttr(x starlark.Value, name string) (starlark.Value, error) {
	if hasAttrs, ok := x.(starlark.HasAttrs); ok {
		v, err := hasAttrs.Attr(name)
		if err != nil || v != nil {
			return v, err
		}
	}
	return nil, fmt.Errorf("%s has no .%s field or method", x.Type(), name)
}

func checkMethod(x starlark.Value, name string, args starlark.Tuple, kwargs []starlark.Tuple) error {
	switch name {
	case "append", "insert", "add", "setdefault":
		// One element more (setdefault of a key present adds none: it is
		// refused only at the limit itself).
		if n := sizeOf(x); n >= MaxLen {
			return tooLarge("the "+x.Type(), n+1)
		}
	case "update", "union":
		n := max(sizeOf(x), 0) + len(kwargs)
		for _, a := range args {
			n += max(starlark.Len(a), 0)
		}
		if n > MaxLen {
			return tooLarge(x.Type()+"."+name+"()", n)
		}
	case "extend":
		if len(args) == 1 {
			if n := sizeOf(x) + max(starlark.Len(args[0]), 0); n > MaxLen {
				return tooLarge("the extended list", n)
			}
		}
	case "join":
		s, ok := x.(starlark.String)
		if !ok || len(args) != 1 {
			return nil
		}
		if n := starlark.Len(args[0]); n > MaxLen {
			return tooLarge("the joined string's parts", n)
		}
		iterable, ok := args[0].(starlark.Iterable)
		if !ok {
			return nil
		}
		it := iterable.Iterate()
		defer it.Done()
		total := 0
		var e starlark.Value
		for it.Next(&e) {
			total += len(s) + max(sizeOf(e), 0)
			if total > MaxLen {
				return tooLarge("the joined string", total)
			}
		}
	case "replace":
		s, ok := x.(starlark.String)
		if !ok || len(args) < 2 {
			return nil
		}
		old, ok1 := args[0].(starlark.String)
		repl, ok2 := args[1].(starlark.String)
		if !ok1 || !ok2 || len(repl) <= len(old) {
			return nil
		}
		count := strings.Count(string(s), string(old))
		if len(args) > 2 {
			if c, ok := args[2].(starlark.Int); ok {
				if k, exact := c.Int64(); exact && k >= 0 && int(k) < count {
					count = int(k)
				}
			}
		}
		if grow := len(repl) - len(old); count > 0 && (grow > MaxLen/count || len(s)+count*grow > MaxLen) {
			return tooLarge("the replaced string", len(s)+min(count, MaxLen)*min(grow, MaxLen))
		}
	case "format":
		s, ok := x.(starlark.String)
		if !ok {
			return nil
		}
		all := append(starlark.Tuple{}, args...)
		for _, kv := range kwargs {
			all = append(all, kv[1])
		}
		return checkInterpolation(string(s), strings.Count(string(s), "{"), all)
	}
	return nil
}
