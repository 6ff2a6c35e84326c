/*
 * Delta's log store for `file:` paths, with a listFrom that reads names before it stats files.
 *
 * Delta's LocalLogStore answers listFrom(<_delta_log>/<version>) with FileSystem.listStatus of the whole
 * _delta_log, which stats every file in it (about 30 us per file on a local disk), and then keeps the names at
 * or after the requested one. Delta asks for such a listing on every snapshot update, so each query, stream and
 * commit paid for every commit the log still holds (up to logRetentionDuration of them). This store reads the
 * directory's names (no stat), keeps those at or after the requested one, sorts them and stats only those: the
 * same files in the same order, at a cost that does not grow with the commits before the newest checkpoint.
 * Delta asks for this upstream in delta-io/delta#2684; S3 has it as delta.enableFastS3AListFrom.
 *
 * Built by streaming_pipeline.lakehouse.engine.log_store with the JDK's javac, against the engine's own Delta and Hadoop
 * jars, and registered as spark.delta.logStore.file.impl (docs/maintenance.md).
 */
package streamingpipeline.delta;

import io.delta.storage.LocalLogStore;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

public class FastListFromLocalLogStore extends LocalLogStore {

  public FastListFromLocalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (!(fs instanceof RawLocalFileSystem || fs instanceof LocalFileSystem)) {
      return super.listFrom(path, hadoopConf); // `file:` mapped to a file system of another kind
    }
    Path directory = fs.makeQualified(path.getParent());
    String[] names = new File(directory.toUri()).list();
    if (names == null) {
      throw new FileNotFoundException("No such directory: " + directory);
    }
    String first = path.getName();
    Arrays.sort(names);
    List<FileStatus> statuses = new ArrayList<>();
    for (String name : names) {
      if (name.compareTo(first) < 0) {
        continue;
      }
      try {
        // The three-argument Path keeps a name with a colon a name (as RawLocalFileSystem.listStatus does).
        statuses.add(fs.getFileStatus(new Path(directory, new Path(null, null, name))));
      } catch (FileNotFoundException deletedSinceListed) {
        // Log cleanup removed it between the two calls, as listStatus would skip it.
      }
    }
    return statuses.iterator();
  }
}
