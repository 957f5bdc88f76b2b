package deploy_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root, relative to this package.
const repoRoot = ".."

// testVersion and testCommit are passed to both builds so their -ldflags
// compare equal.
const (
	testVersion = "v0.0.0-test"
	testCommit  = "0123abc"
)

// goBuild is one "go build" command line, split into the environment it
// sets, its flags and arguments (with the -o value left out: the image and
// bin/ put the binary in different places) and its output.
type goBuild struct {
	Env    map[string]string
	Args   []string
	Output string
}

// parseGoBuild splits a shell command line "A=b C=d go build ARGS...".
func parseGoBuild(t *testing.T, line string) goBuild {
	t.Helper()
	words := shellWords(t, line)
	b := goBuild{Env: map[string]string{}}
	i := 0
	for ; i < len(words) && isAssignment(words[i]); i++ {
		k, v, _ := strings.Cut(words[i], "=")
		b.Env[k] = v
	}
	require.GreaterOrEqual(t, len(words)-i, 2, "no go build in %q", line)
	require.Equal(t, []string{"go", "build"}, words[i:i+2], "want \"[ENV=...] go build ...\", got %q", line)
	for rest := words[i+2:]; len(rest) > 0; rest = rest[1:] {
		if rest[0] == "-o" && len(rest) > 1 {
			b.Output, rest = rest[1], rest[1:]
			continue
		}
		b.Args = append(b.Args, rest[0])
	}
	return b
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func isAssignment(w string) bool { return assignment.MatchString(w) }

// shellWords splits a line into words the way sh does for the simple lines
// used here: blanks separate words, double and single quotes group.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case unicode.IsSpace(r):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	require.Zero(t, quote, "unterminated quote in %q", line)
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// dockerfileInstructions returns the Dockerfile's instructions with line
// continuations joined and comments dropped.
func dockerfileInstructions(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	require.NoError(t, sc.Err())
	return out
}

// dockerfileBuild is the Dockerfile's go build, with the build arguments
// it uses expanded: VERSION as testVersion, COMMIT as testCommit, the
// target platform as unset.
func dockerfileBuild(t *testing.T) goBuild {
	t.Helper()
	var runs []string
	for _, in := range dockerfileInstructions(t) {
		if cmd, ok := strings.CutPrefix(in, "RUN "); ok && strings.Contains(cmd, "go build") {
			runs = append(runs, cmd)
		}
	}
	require.Len(t, runs, 1, "want exactly one RUN ... go build in the Dockerfile")
	expanded := strings.NewReplacer(
		"${VERSION}", testVersion,
		"${COMMIT}", testCommit,
		"${TARGETOS:-linux}", "linux",
		"${TARGETARCH}", "",
	).Replace(runs[0])
	require.NotContains(t, expanded, "${", "the Dockerfile's go build uses a build argument this test does not know")
	return parseGoBuild(t, expanded)
}

// makefileBuild is the go build that "make TARGET" runs, from make's dry
// run, plus the variables the Makefile exports to every recipe.
func makefileBuild(t *testing.T, target string) goBuild {
	t.Helper()
	makeBin, err := exec.LookPath("make")
	require.NoError(t, err, "make is needed to read the Makefile's recipes")
	cmd := exec.Command(makeBin, "--no-print-directory", "-n", target, "VERSION="+testVersion, "COMMIT="+testCommit)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	require.NoError(t, err, "make -n %s", target)
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "go build") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	require.Len(t, lines, 1, "want exactly one go build in make -n %s:\n%s", target, out)
	b := parseGoBuild(t, lines[0])
	for k, v := range makefileExports(t) {
		if _, set := b.Env[k]; !set {
			b.Env[k] = v
		}
	}
	return b
}

// makefileExports reads "export NAME := VALUE" lines.
func makefileExports(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	re := regexp.MustCompile(`(?m)^export\s+([A-Za-z_][A-Za-z0-9_]*)\s*:?=\s*(.*?)\s*$`)
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestDockerfile_buildsLikeTheMakefile: no container engine runs in CI, so
// the image's binary is only trustworthy if the Dockerfile runs the same go
// build as "make build", whose binary the tests exercise. GOOS and GOARCH
// are the only differences allowed: they choose the platform, not the
// binary's behaviour.
func TestDockerfile_buildsLikeTheMakefile(t *testing.T) {
	docker := dockerfileBuild(t)
	for _, target := range []string{"build", "docker-build-equivalent"} {
		t.Run(target, func(t *testing.T) {
			mk := makefileBuild(t, target)
			assert.Equal(t, "0", docker.Env["CGO_ENABLED"], "the Dockerfile must build with CGO_ENABLED=0 (static binary on distroless)")
			assert.Equal(t, docker.Env["CGO_ENABLED"], mk.Env["CGO_ENABLED"], "CGO_ENABLED differs")
			assert.Equal(t, docker.Args, mk.Args, "go build flags or package differ between the Dockerfile and make %s", target)
			assert.Contains(t, mk.Args, "-trimpath")
			assert.Equal(t, "./cmd/guard", mk.Args[len(mk.Args)-1], "the package built")
			i := slices.Index(mk.Args, "-ldflags")
			if assert.GreaterOrEqual(t, i, 0, "no -ldflags") && assert.Less(t, i+1, len(mk.Args)) {
				assert.Contains(t, mk.Args[i+1], "-X main.version="+testVersion, "the version must reach the binary")
				assert.Contains(t, mk.Args[i+1], "-X main.commit="+testCommit, "the commit must reach the binary")
			}
			for k := range mk.Env {
				if k != "CGO_ENABLED" && k != "GOOS" && k != "GOARCH" {
					assert.Contains(t, docker.Env, k, "make %s sets %s for go build, the Dockerfile does not", target, k)
				}
			}
		})
	}
	t.Run("docker-build-equivalent targets linux like the image", func(t *testing.T) {
		assert.Equal(t, "linux", makefileBuild(t, "docker-build-equivalent").Env["GOOS"])
		assert.Equal(t, "linux", docker.Env["GOOS"])
	})
}

// TestDockerfile_followsHouseStyle checks the image's shape in the house
// style: a multi-stage build from the Go image whose go mod download layer
// is cached, and a distroless static:nonroot runtime running as 65532.
func TestDockerfile_followsHouseStyle(t *testing.T) {
	ins := dockerfileInstructions(t)
	var froms []string
	index := func(prefix string) int {
		return slices.IndexFunc(ins, func(s string) bool { return strings.HasPrefix(s, prefix) })
	}
	for _, in := range ins {
		if from, ok := strings.CutPrefix(in, "FROM "); ok {
			froms = append(froms, from)
		}
	}
	require.GreaterOrEqual(t, len(froms), 2, "a multi-stage build")
	assert.True(t, strings.HasPrefix(froms[0], "golang:"), "the build stage uses the Go image: %s", froms[0])
	assert.Equal(t, "gcr.io/distroless/static:nonroot", froms[len(froms)-1], "the runtime image")
	assert.Equal(t, "USER 65532:65532", ins[slices.IndexFunc(ins, func(s string) bool { return strings.HasPrefix(s, "USER ") })])

	modCopy, download, srcCopy := index("COPY go.mod go.sum"), index("RUN go mod download"), index("COPY cmd/")
	require.True(t, modCopy >= 0 && download >= 0 && srcCopy >= 0, "COPY go.mod go.sum, RUN go mod download, COPY cmd/ are all needed")
	assert.True(t, modCopy < download && download < srcCopy,
		"go mod download must run after copying go.mod and go.sum and before copying the sources, so its layer is cached")
}

// TestDockerignore_allowsEverythingTheBinaryImports: .dockerignore is an
// allow-list and the Dockerfile copies folders one by one. A new package
// that cmd/guard imports from another folder would break the image build
// only where a container engine runs; catch it here.
func TestDockerignore_allowsEverythingTheBinaryImports(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/guard")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	require.NoError(t, err)
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)

	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	require.NoError(t, err)
	ignoreLines := strings.Split(string(ignore), "\n")
	assert.Equal(t, "*", firstRule(ignoreLines), ".dockerignore must start by ignoring everything (an allow-list)")

	var copied []string
	for _, in := range dockerfileInstructions(t) {
		if args, ok := strings.CutPrefix(in, "COPY "); ok && !strings.HasPrefix(args, "--from") {
			f := strings.Fields(args)
			copied = append(copied, f[:len(f)-1]...)
		}
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		require.NoError(t, err)
		top := strings.Split(filepath.ToSlash(rel), "/")[0] + "/"
		assert.Contains(t, copied, top, "cmd/guard imports %s, but the Dockerfile does not COPY %s", rel, top)
		assert.Contains(t, ignoreLines, "!"+top, "cmd/guard imports %s, but .dockerignore does not allow %s", rel, top)
	}
}

func firstRule(lines []string) string {
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}
