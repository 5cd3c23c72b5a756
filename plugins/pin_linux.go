package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// pinned is a plugin executable opened, hashed and handed to a command as
// an inherited file: the command executes /proc/self/fd/N, the very file
// that was hashed, so a file renamed over the path after the check is
// never run. A write into the file itself between the check and the exec
// is caught by hashing the file again once the process runs (from then on
// the kernel refuses writes to a running executable): the process is
// killed before it is configured. The plugin process keeps the
// descriptor: a read-only handle on its own executable.
//
// A script ("#!") is executed by its path instead: its interpreter opens
// the script by name and finds its own files beside it. Once the process
// runs, the path must still name the file that was hashed, else the start
// fails. (The interpreter and whatever the script imports are not
// verified: pin a compiled binary for the full guarantee.)
type pinned struct {
	f      *os.File
	want   string
	script bool
}

// pinExecutable opens cmd.Path, checks that it has the sha256 want (hex)
// and rewrites cmd to execute the open file. Args[0] keeps the real path.
func pinExecutable(cmd *exec.Cmd, want string) (*pinned, error) {
	f, err := os.Open(cmd.Path)
	if err != nil {
		return nil, fmt.Errorf("open plugin: %w", err)
	}
	p := &pinned{f: f, want: strings.ToLower(want)}
	if err := p.verify(cmd.Path); err != nil {
		f.Close()
		return nil, err
	}
	var magic [2]byte
	if _, err := f.ReadAt(magic[:], 0); err == nil && string(magic[:]) == "#!" {
		p.script = true
		return p, nil
	}
	// The child gets the file as fd 3+len(ExtraFiles), a fixed number
	// whatever the parent's descriptor is.
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	if len(cmd.Args) == 0 {
		cmd.Args = []string{cmd.Path}
	}
	cmd.Path = "/proc/self/fd/" + strconv.Itoa(fd)
	return p, nil
}

// verify hashes the whole open file.
func (p *pinned) verify(path string) error {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(p.f, 0, math.MaxInt64)); err != nil {
		return fmt.Errorf("read plugin: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.want {
		return checksumError(path, got, p.want)
	}
	return nil
}

// unchanged checks, once the process runs, that the file executed still
// has the checksum.
func (p *pinned) unchanged(path string) error {
	if p.script {
		var byPath, byFD syscall.Stat_t
		if err := syscall.Stat(path, &byPath); err != nil {
			return fmt.Errorf("stat plugin: %w", err)
		}
		if err := syscall.Fstat(int(p.f.Fd()), &byFD); err != nil {
			return fmt.Errorf("stat plugin: %w", err)
		}
		if byPath.Dev != byFD.Dev || byPath.Ino != byFD.Ino {
			return fmt.Errorf("%w: %s was replaced while it was being started; refusing to run it", ErrChecksum, path)
		}
	}
	return p.verify(path)
}

func (p *pinned) close() { p.f.Close() }

// selfExe names the host's own executable, the file it was started from
// even when the path now holds another.
const selfExe = "/proc/self/exe"
