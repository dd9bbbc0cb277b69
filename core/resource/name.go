package resource

// NameRule says what ValidName admits, for the refusals that quote it.
const NameRule = "must be 1-253 lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit"

// ValidName reports whether s is a valid object name — of resources,
// provider configs and reactor bindings, as the tables' CHECK constraints
// say: 1-253 lowercase letters, digits, '.', '_' or '-', starting and ending
// with a letter or digit (^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$).
// A byte loop rather than the regular expression: a compose checks every
// child's name, and the regexp was a third of planning a thousand children.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && ((c != '.' && c != '_' && c != '-') || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
