package sluice.testing;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * The `file` scheme of every JVM the tests start (core-site.xml beside it on the test class path):
 * Hadoop's local file system, with its two shell-outs done in the JVM. Without Hadoop's native
 * library (pyspark ships none) every setPermission forks `chmod` and every getFileLinkStatus forks
 * `readlink`; each file a micro-batch writes to its checkpoint costs a few of them, and on the
 * machines here a fork costs 10-25 ms: the offset and commit logs took ~45 ms a batch each, 2 ms with
 * this. Same results, same files (checksums included): only how the two calls are made differs.
 */
public class NoForkLocalFileSystem extends LocalFileSystem {

  public NoForkLocalFileSystem() {
    super(new Raw());
  }

  /** The raw (checksum-less) layer, which both this class and {@link NoForkLocalFs} wrap. */
  public static class Raw extends RawLocalFileSystem {

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      if (permission.getStickyBit()) {  // no java.nio form for it; only directories get it
        super.setPermission(p, permission);
      } else {
        Files.setPosixFilePermissions(pathToFile(p).toPath(),
            PosixFilePermissions.fromString(permission.toString()));
      }
    }

    @Override
    public FileStatus getFileLinkStatus(Path f) throws IOException {
      // Hadoop's answer for anything but a symbolic link is getFileStatus's; links keep its path.
      if (Files.isSymbolicLink(pathToFile(f).toPath())) {
        return super.getFileLinkStatus(f);
      }
      return getFileStatus(f);
    }
  }
}
