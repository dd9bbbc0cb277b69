package api

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// refuseNUL refuses an operation whose variables or string literals hold a
// NUL character: Postgres stores no NUL in text or jsonb, so one would fail
// in the database as an INTERNAL error. It runs on the parsed operation,
// for every transport: a raw body can hide a NUL behind escapes (the JSON
// "\\u0000" is the GraphQL escape \u0000), and a websocket message never
// passes readBody.
func refuseNUL(oc *graphql.OperationContext) *gqlerror.Error {
	if !docHasNUL(oc.Doc) && !valueHasNUL(oc.Variables) {
		return nil
	}
	err := gqlerror.Errorf("%s", errNUL.Error())
	err.Extensions = map[string]any{"code": codeBadUserInput}
	return err
}

// valueHasNUL walks a decoded JSON value (the variables).
func valueHasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.IndexByte(v, 0) >= 0
	case json.RawMessage:
		return hasNUL(v)
	case []any:
		for _, e := range v {
			if valueHasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 || valueHasNUL(e) {
				return true
			}
		}
	}
	return false
}

// docHasNUL reports a string literal holding a NUL anywhere in the
// document: arguments, directives and variable defaults, in operations and
// fragments alike.
func docHasNUL(doc *ast.QueryDocument) bool {
	if doc == nil {
		return false
	}
	for _, op := range doc.Operations {
		if varsHaveNUL(op.VariableDefinitions) || directivesHaveNUL(op.Directives) || selectionHasNUL(op.SelectionSet) {
			return true
		}
	}
	for _, f := range doc.Fragments {
		if varsHaveNUL(f.VariableDefinition) || directivesHaveNUL(f.Directives) || selectionHasNUL(f.SelectionSet) {
			return true
		}
	}
	return false
}

func varsHaveNUL(defs ast.VariableDefinitionList) bool {
	for _, d := range defs {
		if literalHasNUL(d.DefaultValue) || directivesHaveNUL(d.Directives) {
			return true
		}
	}
	return false
}

func directivesHaveNUL(ds ast.DirectiveList) bool {
	for _, d := range ds {
		if argsHaveNUL(d.Arguments) {
			return true
		}
	}
	return false
}

func argsHaveNUL(args ast.ArgumentList) bool {
	for _, a := range args {
		if literalHasNUL(a.Value) {
			return true
		}
	}
	return false
}

func selectionHasNUL(set ast.SelectionSet) bool {
	for _, s := range set {
		switch s := s.(type) {
		case *ast.Field:
			if argsHaveNUL(s.Arguments) || directivesHaveNUL(s.Directives) || selectionHasNUL(s.SelectionSet) {
				return true
			}
		case *ast.InlineFragment:
			if directivesHaveNUL(s.Directives) || selectionHasNUL(s.SelectionSet) {
				return true
			}
		case *ast.FragmentSpread:
			if directivesHaveNUL(s.Directives) {
				return true
			}
		}
	}
	return false
}

// literalHasNUL walks a literal: its Raw is the decoded string of a string
// or block string, and lists and objects hold their values as children.
func literalHasNUL(v *ast.Value) bool {
	if v == nil {
		return false
	}
	if (v.Kind == ast.StringValue || v.Kind == ast.BlockValue) && strings.IndexByte(v.Raw, 0) >= 0 {
		return true
	}
	for _, c := range v.Children {
		if strings.IndexByte(c.Name, 0) >= 0 || literalHasNUL(c.Value) {
			return true
		}
	}
	return false
}

// hasNUL reports a raw NUL byte or an unescaped \u0000 JSON escape.
func hasNUL(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		at := i + j
		slashes := 0
		for k := at - 1; k >= 0 && b[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 { // the backslash itself is not escaped
			return true
		}
		i = at + 1
	}
}
