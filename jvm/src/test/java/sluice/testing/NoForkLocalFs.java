package sluice.testing;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;

/**
 * {@link NoForkLocalFileSystem} for FileContext, which Spark's checkpoint file manager writes
 * through: what Hadoop's LocalFs is to its LocalFileSystem (checksums over the raw layer).
 */
public class NoForkLocalFs extends ChecksumFs {

  public NoForkLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
  }

  static class Raw extends DelegateToFileSystem {

    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new NoForkLocalFileSystem.Raw(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;  // no port: a local path
    }

    @Override
    public boolean isValidName(String src) {
      return true;  // as Hadoop's RawLocalFs: local names may hold ':' and other characters HDFS refuses
    }
  }
}
