package images

import (
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
)

// tree makes the files (empty) and symbolic links ("link -> target",
// target relative to the link's folder) under root; a name ending in /
// is a folder.
func tree(t *testing.T, root string, entries ...string) {
	t.Helper()
	for _, e := range entries {
		p, target, link := strings.Cut(e, " -> ")
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case link:
			err = os.Symlink(target, p)
		case strings.HasSuffix(e, "/"):
			err = os.MkdirAll(p, 0o755)
		default:
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// rel is items as "label path" with paths relative to root.
func rel(t *testing.T, root string, items []Item) []string {
	t.Helper()
	var out []string
	for _, it := range items {
		r, err := filepath.Rel(root, it.Path)
		if err != nil || !filepath.IsAbs(it.Path) {
			t.Fatalf("%s: not an absolute path under %s", it.Path, root)
		}
		out = append(out, string(rune('0'+it.Label))+" "+filepath.ToSlash(r))
	}
	return out
}

// TestFoldersLikeImageFolder: symlinked class folders, subfolders and
// files are followed, images in nested subfolders belong to their class,
// torchvision's extensions are listed in any case, and the order is
// torchvision's (by folder path, so "sub b" before "sub/deeper"). Where
// torchvision is installed, its make_dataset gives the same list.
func TestFoldersLikeImageFolder(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "train")
	tree(t, dir,
		"train/a/1.png", "train/a/2.JPEG", "train/a/6.Tiff", "train/a/notes.txt", "train/a/anim.gif",
		"train/a/sub/3.webp", "train/a/sub/deeper/4.bmp", "train/a/sub b/5.tif",
		"ext/b/7.ppm", "ext/b/8.pgm", "ext/inner/9.jpg", "ext/b/inner -> ../inner", "ext/file.jpg",
		"train/b -> ../ext/b",
		"train/c/10.jpg -> ../../ext/file.jpg", "train/c/gone.png -> nowhere.png",
		"train/readme.txt", "train/loose.jpg")
	items, classes, err := Folders(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0 a/1.png", "0 a/2.JPEG", "0 a/6.Tiff", "0 a/sub/3.webp", "0 a/sub b/5.tif", "0 a/sub/deeper/4.bmp",
		"1 b/7.ppm", "1 b/8.pgm", "1 b/inner/9.jpg",
		"2 c/10.jpg", "2 c/gone.png"} // a broken link fails when loaded, naming it
	got := rel(t, root, items)
	if !slices.Equal(classes, []string{"a", "b", "c"}) || !slices.Equal(got, want) {
		t.Fatalf("Folders: classes %v, items\n%s\nwant\n%s", classes, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	script := `import json, sys
try:
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset
except ImportError as e:
    sys.exit("skip: %s" % e)
classes, idx = find_classes(sys.argv[1])
print(json.dumps([classes, IMG_EXTENSIONS, make_dataset(sys.argv[1], idx, extensions=IMG_EXTENSIONS)]))`
	out, err := exec.Command(python, "-c", script, root).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && strings.HasPrefix(string(exit.Stderr), "skip: ") || errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		t.Skipf("torchvision is not installed for %s: %v", python, err)
	}
	if err != nil {
		t.Fatalf("torchvision: %v", err)
	}
	var ref [3]json.RawMessage
	var refClasses, refExt []string
	var refItems [][2]any
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(ref[0], &refClasses)
	json.Unmarshal(ref[1], &refExt)
	json.Unmarshal(ref[2], &refItems)
	var tv []Item
	for _, it := range refItems {
		tv = append(tv, Item{it[0].(string), int(it[1].(float64))})
	}
	if !slices.Equal(refClasses, classes) || !slices.Equal(refExt, Extensions) || !slices.Equal(tv, items) {
		t.Errorf("torchvision: classes %v, extensions %v, items\n%s", refClasses, refExt, strings.Join(rel(t, root, tv), "\n"))
	}
}

// TestFoldersSkipHiddenNamesAndLinkLoops: a hidden folder is no class (it
// would shift every label after it) and hidden files (macOS's ._x.png) are
// no images; a link to a folder above it is not walked round and round.
func TestFoldersSkipHiddenNamesAndLinkLoops(t *testing.T) {
	root := t.TempDir()
	tree(t, root, ".ipynb_checkpoints/x.png", "a/._1.png", "a/1.png", "a/.cache/2.png", "a/.DS_Store",
		"a/loop -> .", "a/sub/up -> ../..", "b/3.png", "b/down/again -> ../../b")
	items, classes, err := Folders(root)
	if err != nil {
		t.Fatal(err)
	}
	// a/sub/up is root, which is not above a/sub: it is walked but for
	// its folder a, which is, so b's image is a's too, as any link into
	// another class makes it. b/down/again is b, above it: not walked.
	got := rel(t, root, items)
	want := []string{"0 a/1.png", "0 a/sub/up/b/3.png", "1 b/3.png"}
	if !slices.Equal(classes, []string{"a", "b"}) || !slices.Equal(got, want) {
		t.Errorf("classes %v, items %v, want %v", classes, got, want)
	}
}

// TestFoldersRefuseWhatIsNoImageFolder: a file, a folder without class
// folders (one class's folder, or a flat folder of images such as
// ImageNet's validation archive) and a class folder without images are
// errors naming the absolute path, the user's to fix.
func TestFoldersRefuseWhatIsNoImageFolder(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, "file.png", "flat/1.jpg", "flat/2.png", "flat/3.JPEG", "flat/.hidden/",
		"nothing/", "emptyclass/a/1.png", "emptyclass/b/anim.gif", "emptyclass/b/._2.png", "emptyclass/b/sub/",
		"emptyclass/c/", "emptyclass/d/1.png")
	t.Chdir(dir)
	for _, c := range []struct{ root, path, msg string }{
		{"file.png", "file.png", "is a file, not a folder: it should contain one subfolder per class"},
		{"flat", "flat", "it holds 3 image files itself"},
		{"nothing", "nothing", "has no class subfolders: it should contain one subfolder per class"},
		{"emptyclass", "emptyclass/b", "holds no image (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp, in any case), in itself or its subfolders: every class needs one (and 1 more: c)"},
		{"missing", "missing", "no such file or directory"},
	} {
		_, _, err := Folders(c.root)
		var fe *FolderError
		if !errors.As(err, &fe) || fe.Path != filepath.Join(dir, c.path) || !strings.Contains(fe.Msg, c.msg) || !fe.BadInput() {
			t.Errorf("%s: %v, want a FolderError naming %s: …%s…", c.root, err, filepath.Join(dir, c.path), c.msg)
		}
	}
}

// TestMapFolders: validation labels are the positions of its class names
// in training's list, whatever classes validation lacks; a class training
// lacks is refused, naming its folder.
func TestMapFolders(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, "train/a/1.png", "train/b/1.png", "train/c/1.png",
		"val/a/1.png", "val/c/1.png", "val/c/2.png", "val/.ipynb_checkpoints/x.png",
		"extra/a/1.png", "extra/b/1.png", "extra/y/1.png", "extra/z/1.png")
	_, classes, err := Folders(filepath.Join(dir, "train"))
	if err != nil {
		t.Fatal(err)
	}
	items, err := MapFolders(filepath.Join(dir, "val"), classes)
	if got := rel(t, dir, items); err != nil || !slices.Equal(got, []string{"0 val/a/1.png", "2 val/c/1.png", "2 val/c/2.png"}) {
		t.Errorf("val lacking b: %v, %v", got, err)
	}
	_, err = MapFolders(filepath.Join(dir, "extra"), classes)
	var fe *FolderError
	if !errors.As(err, &fe) || fe.Path != filepath.Join(dir, "extra", "y") ||
		fe.Msg != `class "y" is not one of the training data's 3 classes, so it has no label (and 1 more: z)` {
		t.Errorf("val with classes train lacks: %v", err)
	}
}

// TestClassNames: a dataset says how many classes its labels index, for
// comparing with the model's outputs.
func TestClassNames(t *testing.T) {
	items := []Item{{"a/1.png", 0}, {"c/1.png", 2}}
	ds, err := New(items, Config{ClassNames: []string{"a", "b", "c", "d"}})
	if err != nil || ds.NumClasses() != 4 || !slices.Equal(ds.ClassNames(), []string{"a", "b", "c", "d"}) {
		t.Errorf("class folders: %v", err)
	}
	if ds, err := New(items, Config{}); err != nil || ds.NumClasses() != 3 || ds.ClassNames() != nil {
		t.Errorf("file list: %v", err)
	}
	if _, err := New(items, Config{ClassNames: []string{"a", "b"}}); err == nil {
		t.Error("a label past the class names")
	}
}

// TestFolderFormatsLoad: BMP, TIFF and PPM files in class folders load
// through the dataset.
func TestFolderFormatsLoad(t *testing.T) {
	root := t.TempDir()
	img := image.NewNRGBA(image.Rect(0, 0, 40, 30))
	for i := range img.Pix {
		img.Pix[i] = uint8(i)
	}
	img.SetNRGBA(0, 0, color.NRGBA{1, 2, 3, 255})
	tree(t, root, "a/", "b/")
	write := func(name string, enc func(f *os.File) error) {
		f, err := os.Create(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := enc(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	write("a/x.BMP", func(f *os.File) error { return bmp.Encode(f, img) })
	write("b/x.tiff", func(f *os.File) error { return tiff.Encode(f, img, nil) })
	write("b/x.ppm", func(f *os.File) error {
		_, err := f.Write(append([]byte("P6 40 30 255\n"), make([]byte, 3*40*30)...))
		return err
	})
	items, _, err := Folders(root)
	if err != nil || len(items) != 3 {
		t.Fatalf("Folders: %v, %v", items, err)
	}
	ds, err := New(items, Config{Size: 16, Resize: 16})
	if err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if _, label, err := load(t, ds, i, 1); err != nil || label != int64(items[i].Label) {
			t.Errorf("%s: label %d, %v", items[i].Path, label, err)
		}
	}
}

// TestLoadErrorsNameTheAbsolutePath: a file list's relative paths are
// named absolute when they fail.
func TestLoadErrorsNameTheAbsolutePath(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, "a/bad.jpg")
	t.Chdir(dir)
	ds, err := New([]Item{{"a/bad.jpg", 0}, {"a/missing.jpg", 0}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{filepath.Join(dir, "a/bad.jpg") + ": empty file", filepath.Join(dir, "a/missing.jpg") + ": no such file or directory"} {
		if _, _, err := load(t, ds, i, 1); err == nil || err.Error() != want {
			t.Errorf("%v, want %s", err, want)
		}
	}
}
