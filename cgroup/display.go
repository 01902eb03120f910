package cgroup

import (
	"strconv"
	"unicode"
)

// DisplayPath returns a cgroup or file path as it should be shown to a
// person: unchanged when every rune is printable and not a quote or
// backslash, else Go-quoted. Cgroup names may hold any byte but '/', so a
// raw path could carry terminal escape sequences or fake a new line of
// output; ordinary paths keep their familiar look.
func DisplayPath(p string) string {
	for _, r := range p {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || r == '"' || r == '\\' {
			return strconv.Quote(p)
		}
	}
	return p
}

// String shows the node as "PATH (vN)", the path escaped as by DisplayPath.
func (n *Node) String() string {
	return DisplayPath(n.Path) + " (v" + strconv.Itoa(n.Version) + ")"
}
