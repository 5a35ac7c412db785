package dev.sparkkafka.localfs;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;

/**
 * `fs.AbstractFileSystem.file.impl` (what a FileContext, e.g. Spark's checkpoint file manager,
 * uses): Hadoop's LocalFs over {@link NoForkRawLocalFileSystem}.
 */
public class NoForkLocalFs extends ChecksumFs {
  public NoForkLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
  }

  /** Hadoop's RawLocalFs, whose constructors are its package's own. */
  static final class Raw extends DelegateToFileSystem {
    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new NoForkRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // no port
    }

    @Override
    public boolean isValidName(String src) {
      return true; // any local path is a valid name, as in RawLocalFs
    }
  }
}
