package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
)

// TokenFile is another audience's token file, named by its setting
// (API_TOKENS_FILE, WORKER_TOKENS_FILE, MESH_TOKENS_FILE). A credential
// authenticates one audience: a token of the file being loaded that is also
// in one of these is refused, at load and at every reload (which then keeps
// the last good set), naming both files and the lines, never the token.
type TokenFile struct {
	Setting string
	Path    string
}

// tokenLines maps the digest of each token in a token file's content to
// its line; every token file has the token first on its line.
func tokenLines(b []byte) map[[sha256.Size]byte]int {
	out := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		d := sha256.Sum256([]byte(strings.Fields(line)[0]))
		if _, seen := out[d]; !seen {
			out[d] = n
		}
	}
	return out
}

// checkDisjoint refuses a token of content (the file being loaded, already
// parsed) that is also in one of others. Another file that is unset or
// unreadable now is not compared: its own loader reports it, and it is
// compared again at the next reload.
func checkDisjoint(content []byte, others []TokenFile) error {
	for _, o := range others {
		if o.Path == "" {
			continue
		}
		b, err := os.ReadFile(o.Path)
		if err != nil {
			continue
		}
		if err := checkShared(content, o, b); err != nil {
			return err
		}
	}
	return nil
}

// checkShared refuses a token of mine that is also in theirs, the content
// of file o: the first such line of mine.
func checkShared(mine []byte, o TokenFile, theirs []byte) error {
	in := tokenLines(theirs)
	first, theirLine := 0, 0
	for d, n := range tokenLines(mine) {
		if m, ok := in[d]; ok && (first == 0 || n < first) {
			first, theirLine = n, m
		}
	}
	if first == 0 {
		return nil
	}
	return fmt.Errorf("line %d: the token is also in %s %s (line %d): a token authenticates one audience, "+
		"give each its own", first, o.Setting, o.Path, theirLine)
}
