// Command mrm-guest builds what mrmarket's worker guest boots and reads:
//
//	mrm-guest initramfs -init INIT -modules DIR -o initrd.img
//	mrm-guest data -kind wordcount|sort -splits N -split-mib M -seed S -o input.img
//
// initramfs packs the static init (hadoopvm/worker/cmd/mrm-init) with the
// kernel modules listed in DIR/load-order as a newc archive; `make guest`
// (.ci/guest.sh) runs it. data writes an input image (worker.Input): the
// splits a worker's maps read from its input disk.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "initramfs":
		err = initramfs(os.Args[2:])
	case "data":
		err = data(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mrm-guest:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mrm-guest initramfs -init INIT -modules DIR -o FILE\n"+
		"       mrm-guest data -kind wordcount|sort -splits N -split-mib M [-seed S] -o FILE")
	os.Exit(2)
}

func initramfs(args []string) error {
	fs := flag.NewFlagSet("initramfs", flag.ExitOnError)
	initPath := fs.String("init", "", "the static init binary")
	modules := fs.String("modules", "", "a directory of .ko files and their load-order")
	out := fs.String("o", "", "the initramfs to write")
	_ = fs.Parse(args)
	if *initPath == "" || *modules == "" || *out == "" {
		usage()
	}
	initBin, err := os.ReadFile(*initPath)
	if err != nil {
		return err
	}
	order, err := os.ReadFile(filepath.Join(*modules, "load-order"))
	if err != nil {
		return err
	}
	files := []worker.File{{Name: "init", Mode: 0o755, Data: initBin}, {Name: worker.LoadOrder, Data: order}}
	for _, m := range strings.Fields(string(order)) {
		ko, err := os.ReadFile(filepath.Join(*modules, m+".ko"))
		if err != nil {
			return err
		}
		files = append(files, worker.File{Name: filepath.Join(worker.ModulesDir, m+".ko"), Data: ko})
	}
	return writeFile(*out, func(w *bufio.Writer) error { return worker.WriteInitramfs(w, files) })
}

func data(args []string) error {
	fs := flag.NewFlagSet("data", flag.ExitOnError)
	var in worker.Input
	fs.StringVar(&in.Kind, "kind", worker.WordCount, "wordcount (words) or sort (100-byte records)")
	fs.IntVar(&in.Splits, "splits", 4, "splits (maps) in the image")
	mib := fs.Float64("split-mib", 4, "MiB per split (rounded to 4 KiB)")
	fs.Uint64Var(&in.Seed, "seed", 1, "the generator's seed")
	out := fs.String("o", "", "the image to write")
	_ = fs.Parse(args)
	if *out == "" {
		usage()
	}
	in.SplitBytes = int64(*mib*(1<<20)) / worker.BlockSize * worker.BlockSize
	if err := in.Check(); err != nil {
		return err
	}
	return writeFile(*out, func(w *bufio.Writer) error { return in.Write(w) })
}

// writeFile writes a file whole or not at all.
func writeFile(path string, write func(*bufio.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
