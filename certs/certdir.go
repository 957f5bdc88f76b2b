package certs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// File names in CertDir: the defaults of controller-runtime's webhook
// server (webhook.Options.CertName and KeyName).
const (
	// CertFile is the serving certificate in CertDir.
	CertFile = "tls.crt"
	// KeyFile is the serving key in CertDir, readable by its owner only.
	KeyFile = "tls.key"
)

// The layout of CertDir is the one kubelet gives a Secret volume:
//
//	tls.crt -> ..data/tls.crt
//	tls.key -> ..data/tls.key
//	..data  -> ..data-<random>
//	..data-<random>/tls.crt, tls.key
//
// so that one rename of the ..data link swaps the certificate and its key
// together.
const (
	dataLink      = "..data"
	dataDirPrefix = "..data-"
	tmpSuffix     = "_tmp"
)

// writeCertDir makes dir hold cert and key as CertFile and KeyFile, and
// reports whether it wrote anything. Nothing is written when both already
// hold that content.
//
// A new pair is written to a new folder and synced, then the ..data link
// is renamed to point at it: a reader that opens tls.crt and tls.key sees
// the old pair or the new pair, never a part of a file and never a new
// certificate with an old key. Removing the old folder then unlinks the
// files that controller-runtime's certwatcher watches (it follows the
// links), which makes it re-read the pair at once. Folders left by an
// interrupted earlier write are removed too.
func writeCertDir(dir string, cert, key []byte) (bool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	if same(filepath.Join(dir, CertFile), cert) && same(filepath.Join(dir, KeyFile), key) {
		return false, removeStale(dir)
	}

	staged, err := os.MkdirTemp(dir, dataDirPrefix)
	if err != nil {
		return false, fmt.Errorf("creating a folder for the new pair: %w", err)
	}
	if err := stage(staged, cert, key); err != nil {
		_ = os.RemoveAll(staged)
		return false, err
	}
	if err := replaceLink(filepath.Join(dir, dataLink), filepath.Base(staged)); err != nil {
		_ = os.RemoveAll(staged)
		return false, err
	}
	for _, name := range []string{KeyFile, CertFile} {
		path, target := filepath.Join(dir, name), filepath.Join(dataLink, name)
		if t, err := os.Readlink(path); err == nil && t == target {
			continue
		}
		// Only the first write, or one over files put there by something
		// else, gets here.
		if err := replaceLink(path, target); err != nil {
			return true, err
		}
	}
	return true, removeStale(dir)
}

// same reports whether path holds exactly data.
func same(path string, data []byte) bool {
	old, err := os.ReadFile(path)
	return err == nil && bytes.Equal(old, data)
}

// stage writes the pair into the new folder dir.
func stage(dir string, cert, key []byte) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(dir, KeyFile), key, 0o600); err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, CertFile), cert, 0o644)
}

// writeSynced creates path with mode perm (whatever the umask) and data,
// and syncs it to disk.
func writeSynced(path string, data []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// replaceLink atomically makes path a symbolic link to target, whatever
// path was before, by renaming a new link over it.
func replaceLink(path, target string) error {
	tmp := path + tmpSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}

// removeStale removes the data folders that ..data does not point to.
func removeStale(dir string) error {
	current, err := os.Readlink(filepath.Join(dir, dataLink))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) {
		return nil // Not our layout (yet): leave it alone.
	}
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), dataDirPrefix) && e.Name() != current {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing an old pair: %w", err)
	}
	return nil
}
