package dev.sparkkafka.localfs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without child processes. Without Hadoop's native library (pyspark
 * ships none) RawLocalFileSystem runs `chmod` for every file and directory it creates and
 * `readlink` for every link status a FileContext asks (twice per checkpoint rename): about 30
 * processes per micro-batch of a job with its checkpoint on a local disk. The JDK does both.
 */
public class NoForkRawLocalFileSystem extends RawLocalFileSystem {
  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(p, permission); // no POSIX attribute view of the sticky bit
      return;
    }
    Files.setPosixFilePermissions(
        pathToFile(p).toPath(), PosixFilePermissions.fromString(permission.toString()));
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f);
  }
}
