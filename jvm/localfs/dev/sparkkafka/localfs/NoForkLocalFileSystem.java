package dev.sparkkafka.localfs;

import org.apache.hadoop.fs.LocalFileSystem;

/** `fs.file.impl`: the checksummed local FileSystem over {@link NoForkRawLocalFileSystem}. */
public class NoForkLocalFileSystem extends LocalFileSystem {
  public NoForkLocalFileSystem() {
    super(new NoForkRawLocalFileSystem());
  }
}
