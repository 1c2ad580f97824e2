package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/training/safefile"
)

// Extensions are the file name endings Folders lists as images, in any
// case: torchvision's IMG_EXTENSIONS, which ImageFolder lists. Files are
// decoded by their content, as PIL opens them, so a PNG named .jpg loads.
var Extensions = []string{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}

// FolderError is a data folder not laid out as ImageFolder's
// root/<class>/<image>: a file, a folder without class subfolders, a class
// folder without images, or a validation class that training lacks. Path is
// absolute. It is the user's to fix.
type FolderError struct {
	Path string
	Msg  string
}

func (e *FolderError) Error() string { return e.Path + ": " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *FolderError) BadInput() bool { return true }

// Folders lists root/<class>/<image> with the classes numbered in sorted
// order, as torchvision's ImageFolder does: class folders and the folders
// in them may be symbolic links, which are followed (a link back to a
// folder above it is not entered twice), images in subfolders of a class
// folder belong to the class, and the images are those named with one of
// Extensions. Unlike ImageFolder, names starting with "." (such as
// .ipynb_checkpoints or macOS's ._photo.jpg) are skipped, folders and
// files alike. Paths are absolute. A root that is not a folder of class
// folders, or a class folder without images, is a *FolderError.
func Folders(root string) ([]Item, []string, error) {
	root, classes, err := classFolders(root)
	if err != nil {
		return nil, nil, err
	}
	labels := make([]int, len(classes))
	for i := range labels {
		labels[i] = i
	}
	items, err := classItems(root, classes, labels)
	if err != nil {
		return nil, nil, err
	}
	return items, classes, nil
}

// MapFolders lists root as Folders does, but labels each class folder by
// its name's position in classes (the training set's list from Folders),
// as a fixed class_to_idx would: a validation folder lacking some classes
// keeps the labels of the others. A class folder whose name is not in
// classes is a *FolderError naming it.
func MapFolders(root string, classes []string) ([]Item, error) {
	root, names, err := classFolders(root)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(classes))
	for i, c := range classes {
		index[c] = i
	}
	labels := make([]int, len(names))
	var unknown []string
	for i, n := range names {
		l, ok := index[n]
		if !ok {
			unknown = append(unknown, n)
		}
		labels[i] = l
	}
	if len(unknown) > 0 {
		return nil, &FolderError{Path: filepath.Join(root, unknown[0]),
			Msg: fmt.Sprintf("class %q is not one of the training data's %d classes, so it has no label%s", unknown[0], len(classes), more(unknown))}
	}
	return classItems(root, names, labels)
}

// classFolders makes root absolute and lists its class folders: the
// folders (or links to folders) in it, sorted by name.
func classFolders(root string) (string, []string, error) {
	if root == "" {
		return "", nil, errors.New("images: no folder given")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", nil, &FolderError{Path: abs, Msg: reason(err)}
	}
	const layout = "it should contain one subfolder per class, holding that class's images (root/<class>/<image>, as torchvision's ImageFolder reads)"
	if !fi.IsDir() {
		return "", nil, &FolderError{Path: abs, Msg: "is a file, not a folder: " + layout}
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return "", nil, &FolderError{Path: abs, Msg: reason(err)}
	}
	var classes []string
	loose := 0 // image files directly in root
	for _, e := range entries {
		switch {
		case hidden(e.Name()):
		case isDir(abs, e):
			classes = append(classes, e.Name())
		case isImage(e.Name()):
			loose++
		}
	}
	if len(classes) == 0 {
		msg := "has no class subfolders: " + layout
		if loose > 0 {
			msg += fmt.Sprintf("; it holds %d image files itself, as a single class's folder or a flat folder of images (such as ImageNet's official validation archive) does", loose)
		}
		return "", nil, &FolderError{Path: abs, Msg: msg}
	}
	return abs, classes, nil
}

// classItems lists the images of root's class folders names, the images
// of names[i] labelled labels[i]. Each class needs at least one image, as
// in torchvision (its "Found no valid file for the classes").
func classItems(root string, names []string, labels []int) ([]Item, error) {
	var items []Item
	var empty []string
	for i, name := range names {
		files, err := classFiles(filepath.Join(root, name))
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			empty = append(empty, name)
		}
		for _, f := range files {
			items = append(items, Item{f, labels[i]})
		}
	}
	if len(empty) > 0 {
		return nil, &FolderError{Path: filepath.Join(root, empty[0]),
			Msg: fmt.Sprintf("class folder holds no image (%s, in any case), in itself or its subfolders: every class needs one%s",
				strings.Join(Extensions, " "), more(empty))}
	}
	return items, nil
}

// classFiles lists the images under dir in torchvision's order: by folder
// path (sorted(os.walk(dir, followlinks=True))), then by name. Links to
// folders are followed, except one to a folder that contains it, which
// would never end.
func classFiles(dir string) ([]string, error) {
	type listing struct {
		dir   string
		files []string
	}
	var found []listing
	var walk func(dir string, above []os.FileInfo) error
	walk = func(dir string, above []os.FileInfo) error {
		fi, err := os.Stat(dir)
		if err != nil {
			return &FolderError{Path: dir, Msg: reason(err)}
		}
		for _, a := range above {
			if os.SameFile(a, fi) {
				return nil // a link back up the tree
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return &FolderError{Path: dir, Msg: reason(err)}
		}
		var files, subdirs []string
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			switch {
			case hidden(e.Name()):
			case isDir(dir, e):
				subdirs = append(subdirs, p)
			case isImage(e.Name()):
				// A named pipe or device named as an image is refused
				// here, before training, rather than blocking the step
				// that loads it. A broken link is listed, as torchvision
				// lists it: loading it fails naming it.
				if err := notFile(p, e); err != nil {
					return err
				}
				files = append(files, p)
			}
		}
		found = append(found, listing{dir, files})
		above = append(slices.Clip(above), fi)
		for _, s := range subdirs {
			if err := walk(s, above); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(dir, nil); err != nil {
		return nil, err
	}
	// Depth-first order differs from sorted paths ("a/x" sorts after
	// "a b"); Go's byte order of UTF-8 is Python's code point order.
	slices.SortFunc(found, func(a, b listing) int { return strings.Compare(a.dir, b.dir) })
	var files []string
	for _, l := range found {
		files = append(files, l.files...)
	}
	return files, nil
}

// hidden names are skipped: Jupyter's .ipynb_checkpoints, macOS's
// AppleDouble ._x.jpg files, .DS_Store and the like are never data.
func hidden(name string) bool { return strings.HasPrefix(name, ".") }

// isDir reports whether entry e of dir is a folder or a link to one.
func isDir(dir string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	fi, err := os.Stat(filepath.Join(dir, e.Name()))
	return err == nil && fi.IsDir()
}

// notFile refuses entry e, at path p, unless it is a regular file or a
// link (followed) to one; the directory entry's type suffices for all but
// links, so a large folder costs no extra stat per file.
func notFile(p string, e fs.DirEntry) error {
	if e.Type()&fs.ModeSymlink != 0 {
		return safefile.Check(p)
	}
	if !e.Type().IsRegular() {
		return &safefile.NotFileError{Path: p, Mode: e.Type()} // p is absolute: Folders makes root so
	}
	return nil
}

// isImage reports whether name ends with one of Extensions, in any case.
func isImage(name string) bool {
	return slices.Contains(Extensions, strings.ToLower(filepath.Ext(name)))
}

// reason is err without the path an *fs.PathError repeats.
func reason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// more is " (and N more: x, y)" for the names after the first (up to 5 named).
func more(names []string) string {
	if len(names) < 2 {
		return ""
	}
	rest := names[1:]
	s := fmt.Sprintf(" (and %d more: %s", len(rest), strings.Join(rest[:min(len(rest), 5)], ", "))
	if len(rest) > 5 {
		s += ", …"
	}
	return s + ")"
}
