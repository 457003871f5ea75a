package machine

import (
	"fmt"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Every value that reaches a rendered file passes through the one quoting helper of the language
// it lands in, so no value from a stack (validated or not) can add a flag, a unit line, a shell
// command or a YAML key: ExecArg and unitText for systemd units, ShellQuote for sh, yamlString
// for YAML documents, tomlString for containerd's TOML.

// UnitEnv are the variables the units' EnvironmentFiles define; ExecStart arguments may refer to
// them as ${NAME}. Any other '$' is literal.
var UnitEnv = []string{"NODE_NAME", "NODE_IP", "PROVIDER_ID", "INITIAL_CLUSTER_STATE"}

var envRef = regexp.MustCompile(`\$\{(` + strings.Join(UnitEnv, "|") + `)\}`)

// execSafe are the bytes an ExecStart word may hold unquoted.
var execSafe = regexp.MustCompile(`^[A-Za-z0-9_@+=:,./-]+$`)

// ExecArg renders one ExecStart argument so that systemd reads it back as exactly s: '%' is
// doubled (specifiers), '$' doubled except in references to UnitEnv (environment expansion), and
// a word with any byte outside a plain set is double-quoted with C escapes.
func ExecArg(s string) string {
	var b strings.Builder
	plain := true
	last := 0
	for _, loc := range append(envRef.FindAllStringIndex(s, -1), []int{len(s), len(s)}) {
		literal := s[last:loc[0]]
		plain = plain && (literal == "" || execSafe.MatchString(literal))
		for i := 0; i < len(literal); i++ {
			switch c := literal[i]; {
			case c == '%':
				b.WriteString("%%")
			case c == '$':
				b.WriteString("$$")
			case c == '\\' || c == '"':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20 || c == 0x7f:
				fmt.Fprintf(&b, `\x%02x`, c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteString(s[loc[0]:loc[1]])
		last = loc[1]
	}
	if plain && s != "" {
		return b.String()
	}
	return `"` + b.String() + `"`
}

// unitText renders free text for a unit setting that takes no quotes (Description=): one line,
// specifiers escaped, no backslash that could continue the line.
func unitText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return '?'
		}
		return r
	}, strings.ReplaceAll(s, "%", "%%"))
}

// ShellQuote renders s as one POSIX sh word.
func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// yamlString renders s as one YAML scalar (double-quoted, escaped by the YAML encoder).
func yamlString(s string) string {
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle, Value: s})
	if err != nil {
		panic(err) // a string scalar always encodes
	}
	return strings.TrimSuffix(string(out), "\n")
}

// tomlString renders s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteRune('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ExecWords splits an ExecStart value into arguments as systemd does when it loads a unit:
// whitespace separates words, single and double quotes group, C escapes are decoded inside and
// outside quotes, and "%%" is '%'. '$' is left for the exec-time expansion of ExpandEnv. It
// refuses what the rendered units never hold: other specifiers and ';' command separators.
func ExecWords(value string) ([]string, error) {
	var words []string
	i := 0
	for {
		for i < len(value) && (value[i] == ' ' || value[i] == '\t') {
			i++
		}
		if i == len(value) {
			return words, nil
		}
		var w strings.Builder
		quote := byte(0)
		start := i
		for ; i < len(value) && (quote != 0 || (value[i] != ' ' && value[i] != '\t')); i++ {
			switch c := value[i]; {
			case quote != 0 && c == quote, quote == 0 && (c == '"' || c == '\''):
				quote ^= c
			case c == '\\':
				r, n, err := cUnescape(value[i:])
				if err != nil {
					return nil, fmt.Errorf("ExecStart word %d: %w", len(words)+1, err)
				}
				w.WriteString(r)
				i += n - 1
			case c == '%':
				if i+1 >= len(value) || value[i+1] != '%' {
					return nil, fmt.Errorf("ExecStart word %d: specifier %q is not supported", len(words)+1, value[i:min(i+2, len(value))])
				}
				w.WriteByte('%')
				i++
			default:
				w.WriteByte(c)
			}
		}
		if quote != 0 {
			return nil, fmt.Errorf("ExecStart: unterminated %c quote", quote)
		}
		if value[start:i] == ";" {
			return nil, fmt.Errorf("ExecStart: ';' separates commands, which only oneshot units may have")
		}
		words = append(words, w.String())
	}
}

// cUnescape decodes the C escape at the start of s (which begins with a backslash), returning the
// bytes and how many of s it used.
func cUnescape(s string) (string, int, error) {
	if len(s) < 2 {
		return "", 0, fmt.Errorf("a trailing backslash")
	}
	if r, ok := map[byte]string{'a': "\a", 'b': "\b", 'f': "\f", 'n': "\n", 'r': "\r", 't': "\t", 'v': "\v",
		'\\': "\\", '"': "\"", '\'': "'", 's': " "}[s[1]]; ok {
		return r, 2, nil
	}
	if s[1] == 'x' && len(s) >= 4 {
		var b byte
		if _, err := fmt.Sscanf(s[2:4], "%02x", &b); err == nil {
			if b == 0 { // no argument can hold NUL: systemd keeps the escape as text
				return s[:4], 4, nil
			}
			return string([]byte{b}), 4, nil
		}
	}
	return "", 0, fmt.Errorf("escape %q is not supported", s[:2])
}

// envVar is an exec-time environment reference: ${NAME} or $NAME, or the "$$" escape.
var envVar = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// ExpandEnv is systemd's expansion of one ExecStart word when the command runs: ${NAME} and
// $NAME from the unit's environment, "$$" to '$'.
func ExpandEnv(word string, vars map[string]string) string {
	return envVar.ReplaceAllStringFunc(word, func(m string) string {
		if m == "$$" {
			return "$"
		}
		return vars[strings.Trim(m, "${}")]
	})
}
