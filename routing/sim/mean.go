package sim

import "reflect"

// Mean averages results of the same configuration replayed with different
// seeds (G-HBA §3.2 averages twenty runs): every float64 field, and every
// float64 value of a map[string]float64 field, becomes the mean over rs;
// other fields keep the value of rs[0]. Embedded structs are averaged
// field by field. It returns the zero T for an empty rs.
func Mean[T any](rs []T) T {
	var out T
	if len(rs) == 0 {
		return out
	}
	out = rs[0]
	vals := make([]reflect.Value, len(rs))
	for i := range rs {
		vals[i] = reflect.ValueOf(&rs[i]).Elem()
	}
	meanInto(reflect.ValueOf(&out).Elem(), vals)
	return out
}

func meanInto(dst reflect.Value, src []reflect.Value) {
	switch dst.Kind() {
	case reflect.Float64:
		var sum float64
		for _, v := range src {
			sum += v.Float()
		}
		dst.SetFloat(sum / float64(len(src)))
	case reflect.Struct:
		for i := 0; i < dst.NumField(); i++ {
			if !dst.Type().Field(i).IsExported() {
				continue
			}
			fs := make([]reflect.Value, len(src))
			for j, v := range src {
				fs[j] = v.Field(i)
			}
			meanInto(dst.Field(i), fs)
		}
	case reflect.Map:
		if dst.Type().Key().Kind() != reflect.String || dst.Type().Elem().Kind() != reflect.Float64 || dst.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(dst.Type(), dst.Len())
		for _, k := range dst.MapKeys() {
			var sum float64
			for _, v := range src {
				if e := v.MapIndex(k); e.IsValid() {
					sum += e.Float()
				}
			}
			m.SetMapIndex(k, reflect.ValueOf(sum/float64(len(src))).Convert(dst.Type().Elem()))
		}
		dst.Set(m)
	}
}
